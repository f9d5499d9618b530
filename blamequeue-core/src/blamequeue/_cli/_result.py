"""The ``result`` command: print what a job's handler returned, waiting for it if asked."""

from __future__ import annotations

import argparse
import json

from blamequeue import Queue

from ._config import add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, print_json
from ._running import EXIT_OK, Subparsers, non_negative_seconds

__all__ = ["add_parser"]


_MANUAL = """\
print a job's result (its handler's return value), waiting up to --timeout

Print the value JOB_ID's handler returned, as JSON.  A job still pending or
running is waited for, up to --timeout seconds (default 0: look once).  Exit code
3 when the backend holds no such job (a done job is kept only for retain_done
seconds), 1 when the job failed (its last error is shown) or the time ran out.

examples:
  blamequeue result job-01J0ZK5V3G9YB6R2W8X4T1QH7C
  blamequeue result job-01J0ZK5V3G9YB6R2W8X4T1QH7C --timeout 30
  blamequeue result job-01J0ZK5V3G9YB6R2W8X4T1QH7C --json | jq .result
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "result", _MANUAL, run=_result)
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's id (job-...)")
    parser.add_argument(
        "--timeout",
        type=non_negative_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a job not finished yet (default: 0, look once)",
    )
    add_json_option(parser)
    add_queue_options(parser)


def _result(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        value = await queue.result(args.job_id, timeout=args.timeout, backend=backend)
        if args.json:
            print_json({"job_id": args.job_id, "backend": backend, "result": value})
        else:
            print(json.dumps(value, ensure_ascii=False, indent=2))
        return EXIT_OK

    return with_queue(args, body)
