"""The ``pause`` and ``resume`` commands: stop or restart every worker of a queue, in every
process sharing the backend (``Queue.pause`` / ``Queue.resume``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

from blamequeue import Queue

from ._config import CONFIG_HELP, add_queue_options, with_queue
from ._output import print_json
from ._running import EXIT_OK

__all__ = ["add_parser"]

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_parser(subparsers: Subparsers) -> None:
    for command, summary, detail in [
        (
            "pause",
            "stop every worker of a queue from leasing (enqueues still work)",
            "Pause QUEUE: workers in every process sharing the backend stop leasing its jobs\n"
            "within a second; running jobs finish; enqueues are still taken.  Kept in the\n"
            "backend until 'blamequeue resume'.",
        ),
        (
            "resume",
            "let the workers of a paused queue lease again",
            "Resume QUEUE: its workers lease again (within a second in other processes).",
        ),
    ]:
        parser = subparsers.add_parser(
            command,
            help=summary,
            description=detail,
            epilog=f"examples:\n  blamequeue {command} emails\n  blamequeue {command} emails "
            f"--json\n\n{CONFIG_HELP}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("queue", metavar="QUEUE", help="the queue's name")
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        add_queue_options(parser)
        parser.set_defaults(run=_run, pause=command == "pause")


def _run(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        if args.pause:
            changed = await queue.pause(args.queue, backend=backend)
        else:
            changed = await queue.resume(args.queue, backend=backend)
        paused = await queue.is_paused(args.queue, backend=backend)
        if args.json:
            print_json({"queue": args.queue, "paused": paused, "changed": changed})
        else:
            state = "paused" if paused else "running"
            print(f"queue {args.queue!r} is {state}" + ("" if changed else " (it already was)"))
        return EXIT_OK

    return with_queue(args, body)
