"""``blamequeue audit verify FILE``: check a keyed, chained audit file (``JsonlAuditSink``).

The keys come from everywhere the sink could have taken them (``JsonlAuditSink``'s order): each
``--key-file``, ``BLAMEQUEUE_SEAL_KEYS``, the seal keys and local key files of the queue
configuration (``--config`` / ``--path`` / ``BLAMEQUEUE_LOCAL_PATH``, as the other commands
find it) and the sink's own key file ``FILE.key``.  Each line names its key id, so holding more
keys than needed is harmless.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from blamequeue._audit_file import ChainReport, read_keyring, verify_chain
from blamequeue._sealing import _env_config, _read_key_file, key_file_path, parse_seal_config

from ._config import load_config
from ._output import add_json_option, print_json
from ._parser import ExclusiveOptions
from ._running import EXIT_ERROR, EXIT_OK, Subparsers, UsageError, add_command, positive_int

__all__ = ["add_parser", "keyring", "run"]

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")

_EPILOG = """\
examples:
  blamequeue audit verify /var/log/blamequeue/audit.jsonl
      "OK: 1520 events, head 1520 3f1c..." and exit code 0, or the first line that does not
      hold and exit code 1
  blamequeue audit verify audit.jsonl --expect-count 1500 --expect-head 9ab0...
      also fail (exit code 1) when the chain does not reach a head recorded elsewhere (the
      "audit chain head" lines LoggingAuditSink logs): lines were cut off its end
  blamequeue audit verify audit.jsonl --key-file /etc/app/audit.key --json

The file is written by blamequeue.JsonlAuditSink(path): each line carries an HMAC of its exact
bytes and of the line before, under a key derived from a seal key, so an edited, re-spaced,
removed, inserted or reordered line breaks the chain at that line, and nobody without the key
can recompute it.  Keys: BLAMEQUEUE_SEAL_KEYS, --key-file, the queue's configuration
(--config / --path / BLAMEQUEUE_LOCAL_PATH: its seal keys and key files) and FILE.key.
Lines cut off the end leave a valid, shorter chain: compare the head with one kept elsewhere.
"""

_AUDIT_MANUAL = (
    """\
work with audit trails (verify a keyed, chained audit file)

Audit trail tools.

"""
    + _EPILOG
)
_VERIFY_MANUAL = (
    """\
check every line's MAC and link; print the head or the first line that fails

Check a keyed, chained JSON-lines audit file written by JsonlAuditSink.

"""
    + _EPILOG
)


def add_parser(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "audit", _AUDIT_MANUAL)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    verify = add_command(actions, "verify", _VERIFY_MANUAL, run=run)
    verify.add_argument("file", metavar="FILE", help="the audit file")
    verify.add_argument(
        "--expect-count",
        metavar="N",
        type=positive_int,
        help="fail unless the chain has at least N lines (a head count recorded elsewhere)",
    )
    verify.add_argument(
        "--expect-head",
        metavar="H",
        type=_head_hash,
        help="fail unless the chain holds the line whose mac is H (line N with --expect-count)",
    )
    verify.add_argument(
        "--key-file",
        metavar="KEYFILE",
        action="append",
        default=[],
        help="a key file (BLAMEQUEUE_SEAL_KEYS lines: a seal key file or the sink's own); "
        "may be repeated",
    )
    source = ExclusiveOptions(verify)
    source.add_argument(
        "--config", metavar="FILE", help="TOML queue configuration whose seal keys to use"
    )
    source.add_argument(
        "--path", metavar="FILE", help="SQLite file of the local backend (its key file)"
    )
    verify.add_argument(
        "--allow-unkeyed",
        action="store_true",
        help="accept a file written wholly by an older version (an unkeyed chain, which "
        "anyone who can write the file could have recomputed)",
    )
    add_json_option(verify, what="object")


def _key_file(path: str) -> dict[str, bytes]:
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        raise UsageError(f"no such key file: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read key file {path}: {exc.strerror or exc}") from None


def _existing_key_file(path: str) -> dict[str, bytes]:
    return _key_file(path) if os.path.isfile(path) else {}


def _config_keys(config: Mapping[str, Any], where: str) -> Iterator[dict[str, bytes]]:
    """The seal keys a queue configuration (``--config``) names, and its local key files."""
    if config.get("seal") not in (None, False):
        parsed = parse_seal_config(config["seal"], f"{where}: seal")
        if parsed is not False:
            yield dict(parsed.keys)
    for name, backend in config["backends"].items():
        if backend.get("seal") not in (None, False):
            parsed = parse_seal_config(backend["seal"], f"{where}: backends.{name}.seal")
            if parsed is not False:
                yield dict(parsed.keys)
        path = backend.get("path")
        if backend.get("protocol") == "local" and isinstance(path, str) and path != ":memory:":
            yield _existing_key_file(key_file_path(path))


def keyring(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, bytes]:
    """Every key ``verify`` may use (see the module docstring)."""
    sources: list[dict[str, bytes]] = [_key_file(path) for path in args.key_file]
    from_env = _env_config(env)
    if from_env is not None:
        sources.append(dict(from_env.keys))
    if args.config:
        sources.extend(_config_keys(load_config(args.config), f"config file {args.config}"))
    else:
        database = args.path or env.get("BLAMEQUEUE_LOCAL_PATH") or "./blamequeue.db"
        sources.append(_existing_key_file(key_file_path(database)))
    sources.append(_existing_key_file(f"{args.file}.key"))
    return read_keyring(sources)


def _head_hash(value: str) -> str:
    """``--expect-head``: the 64 hex digits of a line's ``mac``."""
    if not _HEX64.match(value.strip().lower()):
        raise argparse.ArgumentTypeError(
            f"{value[:80]!r} is not a head: give the 64 hex digits verify printed after the count"
        )
    return value.strip().lower()


def _expectation(report: ChainReport, args: argparse.Namespace) -> str | None:
    if args.expect_head is None and args.expect_count is None:
        return None
    return report.holds(args.expect_count, args.expect_head)


def run(args: argparse.Namespace) -> int:
    if not Path(args.file).exists():
        raise UsageError(f"no such audit file: {args.file}")
    keys = keyring(args, os.environ)
    try:
        report = verify_chain(args.file, keys)
    except IsADirectoryError:
        raise UsageError(f"{args.file} is a directory, not an audit file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    problem, bad_line = report.problem, report.bad_line
    if problem is not None and problem.startswith("written with key id"):
        problem += (
            "; set BLAMEQUEUE_SEAL_KEYS, or pass --key-file, --config or --path (FILE.key is "
            "read when it exists)"
        )
    keyed = report.events > report.unkeyed
    if problem is None and report.events and not keyed and not args.allow_unkeyed:
        problem = (
            f"written by an older version: unkeyed chain (its {report.events} hashes hold, but "
            f"anyone who can write the file could have recomputed them); pass --allow-unkeyed "
            f"to accept it"
        )
    if problem is None:
        problem = _expectation(report, args)
    ok = problem is None
    notes = _notes(report)
    if args.json:
        print_json(
            {
                "ok": ok,
                "events": report.events,
                "last_hash": report.last_hash,
                "head": {"count": report.head.count, "hash": report.head.hash},
                "bad_line": bad_line,
                "problem": problem,
                "keyed": keyed,
                "key_ids": list(report.key_ids),
                "unkeyed_lines": report.unkeyed,
                "recoveries": [
                    {"line": r.line, "torn_bytes": r.torn_bytes} for r in report.recoveries
                ],
                "notes": notes,
            }
        )
    elif ok:
        print(f"OK: {report.events} events, head {report.head}")
        for note in notes:
            print(f"  {note}")
    else:
        where = f"line {bad_line}: " if bad_line is not None else ""
        print(
            f"FAILED: {where}{problem} ({report.events} events verified"
            f"{' before it' if bad_line is not None else ''}, head {report.head})"
        )
        for note in notes:
            print(f"  {note}")
    return EXIT_OK if ok else EXIT_ERROR


def _notes(report: ChainReport) -> list[str]:
    notes = []
    if report.key_ids:
        notes.append(f"keyed with key id(s) {', '.join(report.key_ids)}")
    if report.unkeyed:
        after = (
            f"; line {report.unkeyed + 1}'s MAC covers them"
            if report.covered
            else ": tamper-evident only against accidental edits"
        )
        notes.append(
            f"lines 1-{report.unkeyed} were written by an older version: unkeyed chain{after}"
        )
    for recovery in report.recoveries:
        notes.append(
            f"recovered at line {recovery.line}: a torn line of {recovery.torn_bytes} bytes "
            f"left by an interrupted write was set aside in this record"
        )
    return notes
