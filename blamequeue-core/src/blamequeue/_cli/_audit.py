"""``blamequeue audit verify FILE``: check a hash-chained audit file (``JsonlAuditSink``)."""

from __future__ import annotations

import argparse
import json

from blamequeue._audit_file import verify_chain

from ._running import EXIT_ERROR, EXIT_OK, UsageError

__all__ = ["add_parser", "run"]

_EPILOG = """\
examples:
  blamequeue audit verify /var/log/blamequeue/audit.jsonl
      "OK: 1520 events, last hash 3f1c..." and exit code 0, or the first line that does not
      hold and exit code 1
  blamequeue audit verify audit.jsonl --json

The file is written by blamequeue.JsonlAuditSink(path): each line carries the hash of the line
before it, so an edited, removed, inserted or reordered line breaks the chain at that line.
Lines cut off the end leave a valid (shorter) chain: compare the last hash with one you kept.
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="work with audit trails (verify a hash-chained audit file)",
        description="Audit trail tools.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action")
    actions.required = True
    verify = actions.add_parser(
        "verify",
        help="check every line's hash and link; name the first line that does not hold",
        description="Check a hash-chained JSON-lines audit file written by JsonlAuditSink.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("file", metavar="FILE", help="the audit file")
    verify.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    verify.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        report = verify_chain(args.file)
    except FileNotFoundError:
        raise UsageError(f"no such audit file: {args.file}") from None
    except IsADirectoryError:
        raise UsageError(f"{args.file} is a directory, not an audit file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "events": report.events,
                    "last_hash": report.last_hash,
                    "bad_line": report.bad_line,
                    "problem": report.problem,
                }
            )
        )
    elif report.ok:
        print(f"OK: {report.events} events, last hash {report.last_hash}")
    else:
        print(
            f"FAILED: line {report.bad_line}: {report.problem} "
            f"({report.events} events verified before it)"
        )
    return EXIT_OK if report.ok else EXIT_ERROR
