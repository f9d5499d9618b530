"""The ``cancel`` command: end one job as ``cancelled`` (``Queue.cancel``)."""

from __future__ import annotations

import argparse

from blamequeue import Queue

from ._config import add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, print_json
from ._running import EXIT_ERROR, EXIT_OK, Subparsers

__all__ = ["add_parser"]


_MANUAL = """\
cancel a job: pending ones never run, a running one is stopped

Cancel the job JOB_ID: it ends in the state 'cancelled'.  A pending, delayed or
parked job never runs; a running one is cancelled at once and its worker stops
the handler at its next heartbeat (lease / 3 seconds).  Exit code 0 when the job
was cancelled, 1 when it had already finished (done, dead or cancelled), 3 when
no such job exists.

examples:
  blamequeue cancel job-01J9Z6Q5M3V7R8T2K4X6C8B0DE
  blamequeue cancel job-01J9Z6Q5M3V7R8T2K4X6C8B0DE --backend fast --json
"""


def add_parser(subparsers: Subparsers) -> None:
    cancel = add_queue_command(subparsers, "cancel", _MANUAL, run=_cancel)
    cancel.add_argument("job_id", metavar="JOB_ID", help="the job's id, as enqueue printed it")
    add_json_option(cancel)
    add_queue_options(cancel)


def _cancel(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        cancelled = await queue.cancel(args.job_id, backend=backend)
        if args.json:
            print_json({"job_id": args.job_id, "backend": backend, "cancelled": cancelled})
        elif cancelled:
            print(f"cancelled job {args.job_id}")
        else:
            print(f"job {args.job_id} had already finished; nothing to cancel")
        return EXIT_OK if cancelled else EXIT_ERROR

    return with_queue(args, body)
