"""``blamequeue dlq list|retry|retry-all|size|purge``: the dead-letter queue, for operators."""

from __future__ import annotations

import argparse

from blamequeue import Queue

from ._config import (
    add_queue_argument,
    add_queue_command,
    add_queue_options,
    per_backend,
    with_queue,
)
from ._inspect import add_size_options
from ._ops import add_purge_options
from ._output import (
    add_json_option,
    cut,
    dead_letter_document,
    print_json,
    print_json_or_table,
    show_payload,
    timestamp,
    wide,
)
from ._running import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    Subparsers,
    positive_int,
    say,
    showing_activity,
)
from ._terminal import progress_terminal

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  blamequeue dlq list emails                      # most recently failed first
  blamequeue dlq list emails --limit 5 --json
  blamequeue dlq retry job-01J0ZK5V3G9YB6R2W8X4T1QH7C
      back to pending with its attempts reset; exit code 3 if no dead job has that id
  blamequeue dlq retry-all emails                 # every dead job of the queue, the same way
  blamequeue dlq size emails
  blamequeue dlq purge emails --yes

Nothing leaves the dead-letter queue on its own: a job stays there until it is retried or
purged.
"""


_DLQ_MANUAL = (
    """\
the dead-letter queue: list, retry, retry-all, size, purge

Work with the dead-letter queue: jobs that ran out of attempts.

"""
    + _EPILOG
)
_LIST_MANUAL = (
    """\
list a queue's dead jobs, most recently failed first

List the dead jobs of QUEUE, most recently failed first, with their last error.

"""
    + _EPILOG
)
_RETRY_MANUAL = (
    """\
put a dead job back to pending, attempts reset (exit 3 if not found)

Move the dead job JOB_ID back to pending, due now, with its attempts reset.
Exit code 3 when no dead job has that id.

"""
    + _EPILOG
)
_RETRY_ALL_MANUAL = (
    """\
put every dead job of a queue back to pending, attempts reset

Move every dead job of QUEUE back to pending, due now, with its attempts reset, and
print how many.  A job that dies again meanwhile is not retried twice.

"""
    + _EPILOG
)
_SIZE_MANUAL = (
    """\
how many dead jobs a queue has

Print how many dead jobs QUEUE has.

"""
    + _EPILOG
)
_PURGE_MANUAL = (
    """\
delete a queue's dead jobs (asks first)

Delete every dead job of QUEUE.  On a terminal it asks first; elsewhere it refuses
unless --yes.

"""
    + _EPILOG
)


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "dlq", _DLQ_MANUAL)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    listing = add_queue_command(actions, "list", _LIST_MANUAL, run=_list)
    add_queue_argument(listing)
    add_json_option(listing)
    listing.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="at most N jobs (default: 50)"
    )
    add_queue_options(listing)

    retry = add_queue_command(actions, "retry", _RETRY_MANUAL, run=_retry)
    retry.add_argument("job_id", metavar="JOB_ID", help="the dead job's id (job-...)")
    add_json_option(retry)
    add_queue_options(retry, backend_help="look only in this backend (default: every backend)")

    retry_all = add_queue_command(actions, "retry-all", _RETRY_ALL_MANUAL, run=_retry_all)
    add_queue_argument(retry_all)
    add_json_option(retry_all)
    add_queue_options(retry_all)

    add_size_options(add_queue_command(actions, "size", _SIZE_MANUAL), dead=True)
    add_purge_options(add_queue_command(actions, "purge", _PURGE_MANUAL), dead=True)


def _list(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        letters = await queue.dlq_list(args.queue, backend=backend, limit=args.limit)
        error_width, payload_width = (60, 40) if wide() else (40, 24)
        print_json_or_table(
            args.json,
            {
                "queue": args.queue,
                "backend": backend,
                "dead_letters": [dead_letter_document(d, backend) for d in letters],
            },
            ["JOB", "ATTEMPTS", "FAILED AT (UTC)", "LAST ERROR", "PAYLOAD"],
            [
                [
                    letter.job_id,
                    str(letter.attempts),
                    timestamp(letter.failed_at),
                    cut(letter.last_error, error_width),
                    cut(show_payload(letter.payload), payload_width),
                ]
                for letter in letters
            ],
            align="lrlll",
            empty=f"the dead-letter queue of {args.queue!r} is empty",
        )
        return EXIT_OK

    return with_queue(args, body)


def _retry(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        tried = await per_backend(
            queue, args, lambda backend: queue.dlq_retry(args.job_id, backend=backend), until=bool
        )
        if tried and tried[-1][1]:
            backend = tried[-1][0]
            if args.json:
                print_json({"job_id": args.job_id, "backend": backend, "retried": True})
            else:
                print(f"{args.job_id} is back to pending on backend {backend!r} (attempts reset)")
            return EXIT_OK
        if args.json:
            print_json({"job_id": args.job_id, "backend": None, "retried": False})
        where = ", ".join(repr(name) for name, _retried in tried)
        say(f"error: no dead job {args.job_id} on backend {where}")
        return EXIT_NOT_FOUND

    return with_queue(args, body)


def _retry_all(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        count = await showing_activity(
            progress_terminal(args.json),
            f"retrying the dead jobs of {args.queue!r}",
            lambda: queue.dlq_retry_all(args.queue, backend=backend),
        )
        if args.json:
            print_json({"queue": args.queue, "backend": backend, "retried": count})
        else:
            jobs = "job" if count == 1 else "jobs"
            print(f"{count} dead {jobs} of {args.queue!r} back to pending (attempts reset)")
        return EXIT_OK

    return with_queue(args, body)
