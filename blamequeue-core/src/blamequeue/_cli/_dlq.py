"""``blamequeue dlq list|retry|size|purge``: the dead-letter queue, for operators."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

from blamequeue import Queue
from blamequeue.errors import UnsupportedError

from ._config import CONFIG_HELP, add_queue_options, chosen_backends, with_queue
from ._inspect import run_size
from ._ops import run_purge
from ._output import cut, dead_letter_document, print_json, print_table, show_payload, timestamp
from ._running import EXIT_NOT_FOUND, EXIT_OK, positive_int, say
from ._terminal import Terminal

__all__ = ["add_parser"]

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

_EPILOG = """\
examples:
  blamequeue dlq list emails                      # most recently failed first
  blamequeue dlq list emails --limit 5 --json
  blamequeue dlq retry job-01J0ZK5V3G9YB6R2W8X4T1QH7C
      back to pending with its attempts reset; exit code 3 if no dead job has that id
  blamequeue dlq size emails
  blamequeue dlq purge emails --yes

Nothing leaves the dead-letter queue on its own: a job stays there until it is retried or
purged.
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="the dead-letter queue: list, retry, size, purge",
        description="Work with the dead-letter queue: jobs that ran out of attempts.",
        epilog=_EPILOG + "\n" + CONFIG_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action")
    actions.required = True

    def action(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(
            name,
            help=help,
            description=description,
            epilog=_EPILOG + "\n" + CONFIG_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        return sub

    listing = action(
        "list",
        "list a queue's dead jobs, most recently failed first",
        "List the dead jobs of QUEUE, most recently failed first, with their last error.",
    )
    listing.add_argument("queue", metavar="QUEUE", help="the queue's name")
    listing.add_argument(
        "--limit",
        type=positive_int,
        default=50,
        metavar="N",
        help="at most N jobs (default: 50)",
    )
    add_queue_options(listing)
    listing.set_defaults(run=_list)

    retry = action(
        "retry",
        "put a dead job back to pending, attempts reset (exit 3 if not found)",
        "Move the dead job JOB_ID back to pending, due now, with its attempts reset.\n"
        "Exit code 3 when no dead job has that id.",
    )
    retry.add_argument("job_id", metavar="JOB_ID", help="the dead job's id (job-...)")
    add_queue_options(retry, backend_help="look only in this backend (default: every backend)")
    retry.set_defaults(run=_retry)

    size = action("size", "how many dead jobs a queue has", "Print how many dead jobs QUEUE has.")
    size.add_argument("queue", metavar="QUEUE", help="the queue's name")
    add_queue_options(size)
    size.set_defaults(run=_size)

    purge = action(
        "purge",
        "delete a queue's dead jobs (asks first)",
        "Delete every dead job of QUEUE.  On a terminal it asks first; elsewhere it refuses\n"
        "unless --yes.",
    )
    purge.add_argument("queue", metavar="QUEUE", help="the queue's name")
    purge.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    add_queue_options(purge)
    purge.set_defaults(run=_purge)


def _list(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        letters = await queue.dlq_list(args.queue, backend=backend, limit=args.limit)
        if args.json:
            print_json(
                {
                    "queue": args.queue,
                    "backend": backend,
                    "dead_letters": [dead_letter_document(d, backend) for d in letters],
                }
            )
            return EXIT_OK
        terminal = Terminal()
        if not letters:
            terminal.print(f"the dead-letter queue of {args.queue!r} is empty")
            return EXIT_OK
        wide = terminal.width >= 140
        print_table(
            terminal,
            ["JOB", "ATTEMPTS", "FAILED AT (UTC)", "LAST ERROR", "PAYLOAD"],
            [
                [
                    letter.job_id,
                    str(letter.attempts),
                    timestamp(letter.failed_at),
                    cut(letter.last_error, 60 if wide else 40),
                    cut(show_payload(letter.payload), 40 if wide else 24),
                ]
                for letter in letters
            ],
            align="lrlll",
        )
        return EXIT_OK

    return with_queue(args, body)


def _retry(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        tried: list[str] = []
        refused: list[UnsupportedError] = []
        for backend in chosen_backends(queue, args):
            try:
                retried = await queue.dlq_retry(args.job_id, backend=backend)
            except UnsupportedError as exc:
                refused.append(exc)
                continue
            tried.append(backend)
            if retried:
                if args.json:
                    print_json({"job_id": args.job_id, "backend": backend, "retried": True})
                else:
                    print(
                        f"{args.job_id} is back to pending on backend {backend!r} (attempts reset)"
                    )
                return EXIT_OK
        if refused and not tried:
            raise refused[0]
        if args.json:
            print_json({"job_id": args.job_id, "backend": None, "retried": False})
        where = ", ".join(repr(name) for name in tried)
        say(f"error: no dead job {args.job_id} on backend {where}")
        return EXIT_NOT_FOUND

    return with_queue(args, body)


def _size(args: argparse.Namespace) -> int:
    return run_size(args, lambda queue, backend: queue.dlq_size(args.queue, backend=backend))


def _purge(args: argparse.Namespace) -> int:
    name = args.queue
    return run_purge(
        args,
        what=f"purge the dead-letter queue of {name!r}",
        count=lambda queue, backend: queue.dlq_size(name, backend=backend),
        purge=lambda queue, backend: queue.dlq_purge(name, backend=backend),
        question=lambda size, backend: (
            f"Delete the {size} dead job(s) of queue {name!r} on backend {backend!r}?"
        ),
        done=lambda deleted: f"deleted {deleted} dead job(s) of queue {name!r}",
    )
