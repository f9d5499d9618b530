"""The ``pause`` and ``resume`` commands: stop or restart every worker of a queue, in every
process sharing the backend (``Queue.pause`` / ``Queue.resume``)."""

from __future__ import annotations

import argparse

from blamequeue import Queue

from ._config import add_queue_argument, add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, print_json
from ._running import EXIT_OK, Subparsers

__all__ = ["add_parser"]


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
        examples = (
            f"examples:\n  blamequeue {command} emails\n  blamequeue {command} emails --json\n"
        )
        parser = add_queue_command(
            subparsers, command, f"{summary}\n\n{detail}\n\n{examples}", run=_run
        )
        add_queue_argument(parser)
        add_json_option(parser)
        add_queue_options(parser)
        parser.set_defaults(pause=command == "pause")


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
