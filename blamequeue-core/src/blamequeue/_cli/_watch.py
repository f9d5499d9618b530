"""The ``watch`` command: a queue's events as any process raises them (``Queue.watch``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from blamequeue import Queue, QueueEvent
from blamequeue._events import EVENT_NAMES, TAPPED
from blamequeue._queue_watch import GAP_EVENT

from ._config import add_queue_argument, add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, fields_of, print_json, timestamp
from ._running import EXIT_OK, Subparsers, add_loop_option, positive_int, say
from ._terminal import Terminal

__all__ = ["WATCHED_EVENTS", "add_parser"]

#: The events a watch can yield, as ``--event`` accepts them (in the documentation's order).
WATCHED_EVENTS = (*(name for name in EVENT_NAMES if name in TAPPED), GAP_EVENT)

_MANUAL = f"""\
print a queue's events as they happen, from every process

Print the events of QUEUE raised by any process sharing the backend (producers,
workers, sweeps) from the moment the command starts, one line each, in order per
job, until Ctrl-C or --count events.  What is shown is what the store may hold:
names, job ids, attempts, times and an error's type, never payloads or error
messages (`blamequeue job JOB_ID` shows those, with the key).  A {GAP_EVENT} line
stands for events the store's capped log dropped before this watcher read them.
Not on sqs (queue/watch-unsupported).  With --json, one JSON object per line.

examples:
  blamequeue watch emails
  blamequeue watch emails --event job.dead --event job.retrying
  blamequeue watch emails --json --count 100 | jq -r .name
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "watch", _MANUAL, run=_watch)
    add_queue_argument(parser)
    parser.add_argument(
        "--event",
        action="append",
        choices=WATCHED_EVENTS,
        metavar="NAME",
        help=f"only these events (repeat it; one of {', '.join(WATCHED_EVENTS)})",
    )
    parser.add_argument(
        "--count", type=positive_int, metavar="N", help="stop after N events (default: never)"
    )
    add_json_option(parser, what="object per event, a line each,")
    add_loop_option(parser)
    add_queue_options(parser)


def _watch(args: argparse.Namespace) -> int:
    wanted: Sequence[str] | None = args.event

    async def body(queue: Queue) -> int:
        terminal = Terminal()
        seen = 0
        async with queue.watch(args.queue, backend=args.backend) as events:
            say(f"watching {args.queue!r}; Ctrl-C stops")
            async for event in events:
                if wanted is not None and event.name not in wanted:
                    continue
                if args.json:
                    print_json(
                        fields_of(event, ("name", "queue", "backend", "at", "job_id", "data"))
                    )
                else:
                    terminal.print(_line(terminal, event))
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
        return EXIT_OK

    return with_queue(args, body, must_exist=False, loop=args.loop)


def _line(terminal: Terminal, event: QueueEvent) -> str:
    details = "  ".join(f"{key}={value}" for key, value in sorted(event.data.items()))
    head = terminal.style(f"{timestamp(event.at)}  {event.name:<15}", "dim")
    return f"{head} {event.job_id or '-'}" + (f"  {details}" if details else "")
