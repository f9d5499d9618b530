"""The ``cancel`` command: end one job as ``cancelled`` (``Queue.cancel``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

from blamequeue import Queue

from ._config import CONFIG_HELP, add_queue_options, with_queue
from ._output import print_json
from ._running import EXIT_ERROR, EXIT_OK

__all__ = ["add_parser"]

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_parser(subparsers: Subparsers) -> None:
    cancel = subparsers.add_parser(
        "cancel",
        help="cancel a job: pending ones never run, a running one is stopped",
        description=(
            "Cancel the job JOB_ID: it ends in the state 'cancelled'.  A pending, delayed or\n"
            "parked job never runs; a running one is cancelled at once and its worker stops\n"
            "the handler at its next heartbeat (lease / 3 seconds).  Exit code 0 when the job\n"
            "was cancelled, 1 when it had already finished (done, dead or cancelled), 3 when\n"
            "no such job exists."
        ),
        epilog=(
            "examples:\n"
            "  blamequeue cancel job-01J9Z6Q5M3V7R8T2K4X6C8B0DE\n"
            "  blamequeue cancel job-01J9Z6Q5M3V7R8T2K4X6C8B0DE --backend fast --json\n"
            f"\n{CONFIG_HELP}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cancel.add_argument("job_id", metavar="JOB_ID", help="the job's id, as enqueue printed it")
    cancel.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_queue_options(cancel)
    cancel.set_defaults(run=_cancel)


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
