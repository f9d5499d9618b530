"""The commands that change a queue: ``enqueue``, ``tick`` and ``purge`` (and the confirmation
that destructive commands ask for)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.lowlevel
import attrs

from blamequeue import Queue
from blamequeue.errors import BadArgumentError, QueueError

from ._config import CONFIG_HELP, add_queue_options, with_queue
from ._output import print_json
from ._running import (
    EXIT_ERROR,
    EXIT_OK,
    LOOPS,
    UsageError,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    say,
)
from ._terminal import Terminal
from ._worker import load_handler

__all__ = ["add_parser", "confirm", "run_purge"]

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def _parser(
    subparsers: Subparsers, name: str, help: str, description: str, examples: str
) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"examples:\n{examples}\n{CONFIG_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def add_parser(subparsers: Subparsers) -> None:
    enqueue = _parser(
        subparsers,
        "enqueue",
        "add a job to a queue (payload as JSON) and print its id",
        "Enqueue one job on QUEUE and print its id.  PAYLOAD is JSON; '-' reads it from\n"
        "stdin; without it the payload is null.",
        '  blamequeue enqueue emails \'{"to": "ada@example.com"}\'\n'
        "  blamequeue enqueue emails '\"plain text\"' --priority 10 --delay 60\n"
        "  echo '{\"report\": 7}' | blamequeue enqueue reports - --max-attempts 3\n"
        '  blamequeue enqueue emails \'{}\' --json        # {"job_id": ..., "queue": ...}\n'
        "  blamequeue enqueue digest '{}' --unique-key daily --unique-for 3600\n",
    )
    enqueue.add_argument("queue", metavar="QUEUE", help="the queue's name")
    enqueue.add_argument(
        "payload",
        metavar="PAYLOAD_JSON",
        nargs="?",
        help="the job's payload as JSON, or - to read it from stdin (default: null)",
    )
    enqueue.add_argument(
        "--priority", type=_int, default=0, metavar="N", help="higher runs first (default: 0)"
    )
    enqueue.add_argument(
        "--delay",
        type=non_negative_seconds,
        default=0.0,
        metavar="S",
        help="seconds before a worker may take it (default: 0)",
    )
    enqueue.add_argument(
        "--max-attempts",
        type=positive_int,
        metavar="N",
        help="attempts before the dead-letter queue (default: the backend's, 5)",
    )
    enqueue.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="S",
        help="seconds a handler may run on it before it is cancelled (default: no limit)",
    )
    enqueue.add_argument("--trace-id", metavar="ID", help="a trace id carried into the audit trail")
    enqueue.add_argument(
        "--classification", metavar="LABEL", help="a data classification label for audit"
    )
    enqueue.add_argument(
        "--unique-key",
        metavar="KEY",
        help="store nothing and print the live job's id if a job with KEY is pending or running",
    )
    enqueue.add_argument(
        "--unique-for",
        type=positive_seconds,
        metavar="S",
        help="hold --unique-key at most S seconds (default: while the job is live)",
    )
    enqueue.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_queue_options(enqueue)
    enqueue.set_defaults(run=_enqueue)

    tick = _parser(
        subparsers,
        "tick",
        "run one batch of due jobs with a handler, then exit (cron, serverless)",
        "Sweep expired leases, lease at most --max due jobs of QUEUE, run MODULE:HANDLER on\n"
        "them, record the outcomes and exit: a worker for cron jobs and serverless functions.\n"
        "Handler failures are retried with backoff as usual (they do not fail the command).\n"
        "Exit code 1 when the backend refused to record an outcome (unsettled > 0).",
        "  blamequeue tick emails app.tasks:send_email\n"
        "  blamequeue tick emails app.tasks:send_email --max 100 --concurrency 8 --json\n"
        "  */5 * * * *  cd /srv/app && blamequeue tick reports app.tasks:render --max 50\n",
    )
    tick.add_argument("queue", metavar="QUEUE", help="the queue's name")
    tick.add_argument(
        "target", metavar="MODULE:HANDLER", help="the handler, e.g. app.tasks:send_email"
    )
    tick.add_argument(
        "--max", type=positive_int, default=10, metavar="N", help="jobs at most (default: 10)"
    )
    tick.add_argument(
        "--lease",
        type=positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds each job is held; not renewed during a tick (default: 30)",
    )
    tick.add_argument(
        "-c",
        "--concurrency",
        type=positive_int,
        default=1,
        metavar="N",
        help="handlers running at once (default: 1, one after another in lease order)",
    )
    tick.add_argument(
        "--app-dir",
        default=".",
        metavar="DIR",
        help="directory put first on sys.path before importing MODULE (default: .)",
    )
    tick.add_argument(
        "--loop", choices=LOOPS, default="asyncio", help="event loop to run on (default: asyncio)"
    )
    tick.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_queue_options(tick)
    tick.set_defaults(run=_tick)

    purge = _parser(
        subparsers,
        "purge",
        "delete every live job of a queue (asks first; the DLQ is kept)",
        "Delete every pending, inflight and parked job of QUEUE, and its retained done jobs.\n"
        "The dead-letter queue is kept (`blamequeue dlq purge`).  On a terminal it asks\n"
        "first; elsewhere (a script, a pipe) it refuses unless --yes.",
        "  blamequeue purge emails\n"
        '  blamequeue purge emails --yes --json          # {"queue": ..., "deleted": 12}\n',
    )
    purge.add_argument("queue", metavar="QUEUE", help="the queue's name")
    purge.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    purge.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_queue_options(purge)
    purge.set_defaults(run=_purge)


# -- confirmation -------------------------------------------------------------------------------
def require_confirmation_possible(args: argparse.Namespace, what: str) -> None:
    """Refuse at once (exit 2) when nobody can be asked and ``--yes`` was not given."""
    if not args.yes and not sys.stdin.isatty():
        raise UsageError(
            f"refusing to {what} without confirmation: stdin is not a terminal; pass --yes"
        )


async def confirm(args: argparse.Namespace, question: str) -> bool:
    """``--yes``, or the operator's answer on the terminal."""
    if args.yes:
        return True
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    # Read on the event loop's own thread, on purpose: nothing else runs while a one-shot
    # command waits for its operator, and Ctrl-C then interrupts the read at once (a worker
    # thread blocked in readline would keep the process alive until Enter).
    await anyio.lowlevel.checkpoint()
    answer = sys.stdin.readline()
    if answer.strip().lower() in ("y", "yes"):
        return True
    say("cancelled; nothing was deleted")
    return False


# -- commands -----------------------------------------------------------------------------------
def _payload(text: str | None) -> Any:
    if text is None:
        return None
    source = "PAYLOAD_JSON"
    if text == "-":
        source = "the payload on stdin"
        text = sys.stdin.read()
    try:
        return json.loads(text, object_pairs_hook=_once_each)
    except QueueError:
        raise
    except ValueError as exc:
        raise UsageError(
            f"{source} is not valid JSON ({exc}); quote it for the shell, e.g. "
            f'\'{{"to": "ada"}}\' or \'"plain text"\''
        ) from None


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: ``{"a": 1, "a": 2}`` would silently keep
    only the last value (SPEC §14), so it is ``queue/bad-payload``."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise BadArgumentError(
                "queue/bad-payload",
                f"the payload's key {key!r} appears more than once in one object; JSON would "
                f"keep only its last value: give each key once",
            )
        mapping[key] = value
    return mapping


def _enqueue(args: argparse.Namespace) -> int:
    payload = _payload(args.payload)

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        job_id = await queue.enqueue(
            args.queue,
            payload,
            backend=backend,
            priority=args.priority,
            delay=args.delay,
            max_attempts=args.max_attempts,
            trace_id=args.trace_id,
            classification=args.classification,
            unique_key=args.unique_key,
            unique_for=args.unique_for,
            timeout=args.timeout,
        )
        if args.json:
            print_json({"job_id": job_id, "queue": args.queue, "backend": backend})
        else:
            print(job_id)
        return EXIT_OK

    return with_queue(args, body, must_exist=False)


def _tick(args: argparse.Namespace) -> int:
    handler = load_handler(args.target, args.app_dir)

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        result = await queue.tick(
            args.queue,
            handler,
            max=args.max,
            lease=args.lease,
            concurrency=args.concurrency,
            backend=backend,
        )
        if args.json:
            print_json({"queue": args.queue, "backend": backend, **attrs.asdict(result)})
        else:
            terminal = Terminal()
            text = (
                f"tick of {args.queue!r}: leased {result.leased}, succeeded {result.succeeded}, "
                f"failed {result.failed} ({result.moved_to_dlq} to the DLQ)"
            )
            if result.stale:
                text += f", stale {result.stale} (lease lost to another worker)"
            if result.unsettled:
                text += f", unsettled {result.unsettled} (back after their lease)"
            depth = "unknown" if result.queue_depth is None else str(result.queue_depth)
            text += f"; {depth} live job(s) left"
            if result.may_have_more:
                text += "; more may be due now"
            terminal.print(text)
        return EXIT_ERROR if result.unsettled else EXIT_OK

    return with_queue(args, body, loop=args.loop)


def run_purge(
    args: argparse.Namespace,
    *,
    what: str,
    count: Callable[[Queue, str], Awaitable[int]],
    purge: Callable[[Queue, str], Awaitable[int]],
    question: Callable[[int, str], str],
    done: Callable[[int], str],
) -> int:
    """A purge command: ask (on a terminal, unless ``--yes``) with ``question(count, backend)``,
    delete with ``purge(queue, backend)``, report ``done(deleted)`` or JSON."""
    require_confirmation_possible(args, what)

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        if not args.yes and not await confirm(args, question(await count(queue, backend), backend)):
            return EXIT_ERROR
        deleted = await purge(queue, backend)
        if args.json:
            print_json({"queue": args.queue, "backend": backend, "deleted": deleted})
        else:
            print(done(deleted))
        return EXIT_OK

    return with_queue(args, body)


def _purge(args: argparse.Namespace) -> int:
    name = args.queue
    return run_purge(
        args,
        what=f"purge queue {name!r}",
        count=lambda queue, backend: queue.size(name, backend=backend),
        purge=lambda queue, backend: queue.purge(name, backend=backend),
        question=lambda size, backend: (
            f"Delete the {size} live job(s) of queue {name!r} on backend {backend!r} (pending, "
            f"inflight, parked) and its retained done jobs? The dead-letter queue is kept."
        ),
        done=lambda deleted: f"purged {deleted} live job(s) from queue {name!r}",
    )
