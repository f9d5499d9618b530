"""``blamequeue keygen``: a new seal key, as a line for ``BLAMEQUEUE_SEAL_KEYS``."""

from __future__ import annotations

import argparse
import json
import sys

from blamequeue._sealing import new_key_line
from blamequeue.errors import QueueError

from ._output import add_json_option
from ._running import EXIT_OK, Subparsers, UsageError, add_command, say

__all__ = ["add_parser", "run"]


_MANUAL = """\
print a new seal key (a kid:base64 line for BLAMEQUEUE_SEAL_KEYS)

Make a new random 32-byte key for sealing payloads and errors at rest,
printed as kid:base64, the format of BLAMEQUEUE_SEAL_KEYS entries (comma-separated,
the first one seals).

examples:
  blamequeue keygen
      print a new key line such as  k20250611-3fa2c1:Zm9v...=
  export BLAMEQUEUE_SEAL_KEYS="$(blamequeue keygen --kid k2),$BLAMEQUEUE_SEAL_KEYS"
      rotate: the new key (first) seals new jobs, the old ones still open older jobs
  blamequeue keygen --json
      {"kid": ..., "key": ..., "line": ...} for scripts

The key is printed on stdout only: keep it in a secret store, never in the repository.
A local (SQLite) queue with no key configured keeps its key in <database>.key, in the same
format; to move to BLAMEQUEUE_SEAL_KEYS, copy that line after any new key.
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "keygen", _MANUAL, run=run)
    parser.add_argument(
        "--kid",
        metavar="NAME",
        help="the key id stored with every row it seals (default: k<date>-<random>); "
        "letters, digits, '.', '_', '-'",
    )
    add_json_option(parser, what="object")


def run(args: argparse.Namespace) -> int:
    try:
        line = new_key_line(args.kid)
    except QueueError as exc:
        raise UsageError(exc.message) from exc
    if args.json:
        kid, _, key = line.partition(":")
        print(json.dumps({"kid": kid, "key": key, "line": line}))
    else:
        print(line)
        if sys.stdout.isatty():
            say(
                "set it with: export BLAMEQUEUE_SEAL_KEYS='<the line above>' (several keys: "
                "comma-separated, the first one seals; keep the old ones to read older jobs)"
            )
    return EXIT_OK
