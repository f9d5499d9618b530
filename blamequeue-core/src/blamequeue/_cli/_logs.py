"""The ``logs`` command: the lines a job's handler wrote with ``ctx.log`` (``Queue.job_logs``)."""

from __future__ import annotations

import argparse

from blamequeue import Queue

from ._config import add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, fields_of, print_json, timestamp
from ._running import EXIT_OK, Subparsers, positive_int
from ._terminal import Terminal

__all__ = ["add_parser"]


_MANUAL = """\
print a job's log: the lines its handler wrote, oldest first

Print the log of JOB_ID: each line its handler wrote with ctx.log, oldest first,
across attempts, with its time (UTC) and the attempt that wrote it.  At most the
last 1,000 lines are kept.  Exit code 3 when the backend holds no such job.

examples:
  blamequeue logs job-01J0ZK5V3G9YB6R2W8X4T1QH7C
  blamequeue logs order-42 --tail 20
  blamequeue logs order-42 --json | jq -r '.lines[].message'
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "logs", _MANUAL, run=_logs)
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's id, as enqueue printed it")
    parser.add_argument(
        "--tail", type=positive_int, metavar="N", help="only the last N lines (default: every line)"
    )
    add_json_option(parser)
    add_queue_options(parser)


def _logs(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        lines = await queue.job_logs(args.job_id, backend=backend)
        if args.tail is not None:
            lines = lines[-args.tail :]
        if args.json:
            print_json(
                {
                    "job_id": args.job_id,
                    "backend": backend,
                    "lines": [fields_of(line, ("time", "attempt", "message")) for line in lines],
                }
            )
            return EXIT_OK
        terminal = Terminal()
        if not lines:
            terminal.print(f"job {args.job_id} has no log lines")
        for line in lines:
            head = f"{timestamp(line.time)}  #{line.attempt}  "
            first, *rest = line.message.splitlines() or [""]
            terminal.print(terminal.style(head, "dim") + first)
            for more in rest:
                terminal.print(" " * len(head) + more)
        return EXIT_OK

    return with_queue(args, body)
