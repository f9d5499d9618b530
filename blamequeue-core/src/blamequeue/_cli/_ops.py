"""The commands that change a queue: ``enqueue``, ``tick`` and ``purge`` (and the confirmation
that destructive commands ask for)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any, TypeAlias

import anyio
import anyio.lowlevel
import attrs

from blamequeue import Queue
from blamequeue.errors import BadArgumentError, QueueError

from ._config import add_queue_argument, add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, fields_of, print_json
from ._running import (
    EXIT_ERROR,
    EXIT_OK,
    Subparsers,
    UsageError,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    say,
    showing_activity,
    whole_number,
)
from ._terminal import Terminal, progress_terminal
from ._worker import add_handler_options, load_handler

__all__ = ["add_parser", "add_purge_options", "confirm", "read_payload"]


_ENQUEUE_MANUAL = """\
add a job to a queue (payload as JSON) and print its id

Enqueue one job on QUEUE and print its id.  PAYLOAD is JSON; '-' reads it from
stdin; without it the payload is null.

examples:
  blamequeue enqueue emails '{"to": "ada@example.com"}'
  blamequeue enqueue emails '"plain text"' --priority 10 --delay 60
  echo '{"report": 7}' | blamequeue enqueue reports - --max-attempts 3
  blamequeue enqueue emails '{}' --json        # {"job_id": ..., "queue": ...}
  blamequeue enqueue digest '{}' --unique-key daily --unique-for 3600
  blamequeue enqueue orders '{"order": 42}' --job-id order-42   # again: stores nothing
  blamequeue enqueue emails '{"to": "ada@example.com"}' --lifo   # ahead of its priority
"""


_TICK_MANUAL = """\
run one batch of due jobs with a handler, then exit (cron, serverless)

Sweep expired leases, lease at most --max due jobs of QUEUE, run the handler
MODULE:OBJECT on them, record the outcomes and exit: a worker for cron jobs and
serverless functions.  Handler failures are retried with backoff as usual (they do not
fail the command).  Exit code 1 when the backend refused to record an outcome
(unsettled > 0).  The handler comes first, as in `blamequeue worker`; the older order
QUEUE MODULE:OBJECT still works for now, with a warning.

examples:
  blamequeue tick app.tasks:send_email emails
  blamequeue tick app.tasks:send_email emails --max 100 --concurrency 8 --json
  */5 * * * *  cd /srv/app && blamequeue tick app.tasks:render reports --max 50
"""


_PURGE_MANUAL = """\
delete every live job of a queue (asks first; the DLQ is kept)

Delete every pending, inflight and parked job of QUEUE, and its retained done jobs.
The dead-letter queue is kept (`blamequeue dlq purge`).  On a terminal it asks
first; elsewhere (a script, a pipe) it refuses unless --yes.

examples:
  blamequeue purge emails
  blamequeue purge emails --yes --json          # {"queue": ..., "deleted": 12}
"""


def add_parser(subparsers: Subparsers) -> None:
    enqueue = add_queue_command(subparsers, "enqueue", _ENQUEUE_MANUAL, run=_enqueue)
    add_queue_argument(enqueue)
    enqueue.add_argument(
        "payload",
        metavar="PAYLOAD_JSON",
        nargs="?",
        help="the job's payload as JSON, or - to read it from stdin (default: null)",
    )
    _add_options(enqueue, _ENQUEUE_OPTIONS)
    enqueue.add_argument(
        "--lifo",
        action="store_true",
        help="ahead of every due job of the same priority already waiting (last in, first out)",
    )
    add_json_option(enqueue)
    add_queue_options(enqueue)

    tick = add_queue_command(subparsers, "tick", _TICK_MANUAL, run=_tick)
    tick.add_argument(
        "target",
        metavar="MODULE:OBJECT",
        help="the handler, e.g. app.tasks:send_email, or a Queue to run its registered tasks",
    )
    add_queue_argument(tick)
    _add_options(tick, _TICK_OPTIONS)
    add_handler_options(tick)
    add_json_option(tick)
    add_queue_options(tick)

    purge = add_queue_command(subparsers, "purge", _PURGE_MANUAL)
    add_purge_options(purge, dead=False)


#: Options as a table: their flags (space-separated), type, default, metavar and help.
_Options: TypeAlias = list[tuple[str, Callable[[str], Any], Any, str, str]]
#: ``enqueue``'s options that are ``Queue.enqueue``'s keyword arguments of the same names.
_ENQUEUE_OPTIONS: _Options = [
    ("--priority", whole_number, 0, "N", "higher runs first (default: 0)"),
    ("--delay", non_negative_seconds, 0.0, "S", "seconds before a worker may take it (default: 0)"),
    (
        "--max-attempts",
        positive_int,
        None,
        "N",
        "attempts before the dead-letter queue (default: the backend's, 5)",
    ),
    (
        "--timeout",
        positive_seconds,
        None,
        "S",
        "seconds a handler may run on it before it is cancelled (default: no limit)",
    ),
    ("--trace-id", str, None, "ID", "a trace id carried into the audit trail"),
    ("--classification", str, None, "LABEL", "a data classification label for audit"),
    (
        "--unique-key",
        str,
        None,
        "KEY",
        "store nothing and print the live job's id if a job with KEY is pending or running",
    ),
    (
        "--unique-for",
        positive_seconds,
        None,
        "S",
        "hold --unique-key at most S seconds (default: while the job is live)",
    ),
    (
        "--job-id",
        str,
        None,
        "ID",
        "the job's id, chosen by you (1 to 128 of letters, digits and -_.:@); when the backend "
        "already holds a job with that id, nothing is stored and its id is printed",
    ),
]
#: ``tick``'s options that are ``Queue.tick``'s keyword arguments of the same names.
_TICK_OPTIONS: _Options = [
    ("--max", positive_int, 10, "N", "jobs at most (default: 10)"),
    (
        "--lease",
        positive_seconds,
        30.0,
        "S",
        "seconds each job is held; not renewed during a tick (default: 30)",
    ),
    (
        "-c --concurrency",
        positive_int,
        1,
        "N",
        "handlers running at once (default: 1, one after another in lease order)",
    ),
]


def _add_options(parser: argparse.ArgumentParser, options: _Options) -> None:
    for flags, kind, default, metavar, text in options:
        parser.add_argument(*flags.split(), type=kind, default=default, metavar=metavar, help=text)


def _keywords(args: argparse.Namespace, options: _Options) -> dict[str, Any]:
    """The values of the options of a table above, by the keyword argument each one is."""
    return fields_of(args, (flags.split()[-1][2:].replace("-", "_") for flags, *_ in options))


def add_purge_options(parser: argparse.ArgumentParser, *, dead: bool) -> None:
    """What ``purge`` and ``dlq purge`` (``dead``) take: QUEUE, ``--yes`` and the rest."""
    add_queue_argument(parser)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    add_json_option(parser)
    add_queue_options(parser)
    parser.set_defaults(run=_purge, dead=dead)


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
def read_payload(text: str | None) -> Any:
    """PAYLOAD_JSON as given (``-``: read from stdin; None: the payload null), parsed."""
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
    payload = read_payload(args.payload)

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        job_id = await queue.enqueue(
            args.queue,
            payload,
            backend=backend,
            lifo=args.lifo,
            **_keywords(args, _ENQUEUE_OPTIONS),
        )
        if args.json:
            print_json({"job_id": job_id, "queue": args.queue, "backend": backend})
        else:
            print(job_id)
        return EXIT_OK

    return with_queue(args, body, must_exist=False)


def _handler_first(args: argparse.Namespace) -> None:
    """``tick QUEUE MODULE:OBJECT`` (the order before the handler came first, as in ``worker``):
    recognised when only the second argument can be a handler, put right, and warned about."""
    if ":" not in args.target and ":" in args.queue:
        args.target, args.queue = args.queue, args.target
        say(
            "warning: `blamequeue tick QUEUE MODULE:OBJECT` is deprecated and stops working in "
            "the next release; give the handler first: "
            f"blamequeue tick {shlex.quote(args.target)} {shlex.quote(args.queue)}"
        )


def _tick(args: argparse.Namespace) -> int:
    _handler_first(args)
    handler = load_handler(args.target, args.app_dir)

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        result = await queue.tick(
            args.queue, handler, backend=backend, **_keywords(args, _TICK_OPTIONS)
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
            if result.deferred:
                text += f", deferred {result.deferred} (RetryLater or RateLimited)"
            depth = "unknown" if result.queue_depth is None else str(result.queue_depth)
            text += f"; {depth} live job(s) left"
            if result.may_have_more:
                text += "; more may be due now"
            terminal.print(text)
        return EXIT_ERROR if result.unsettled else EXIT_OK

    return with_queue(args, body, loop=args.loop)


#: What ``purge`` and ``dlq purge`` (by ``args.dead``) refuse to do without ``--yes``, ask, and
#: report; ``str.format`` fields: queue, size, backend, deleted.
_PURGE_TEXTS = {
    False: (
        "purge queue {queue!r}",
        "Delete the {size} live job(s) of queue {queue!r} on backend {backend!r} (pending, "
        "inflight, parked) and its retained done jobs? The dead-letter queue is kept.",
        "purged {deleted} live job(s) from queue {queue!r}",
    ),
    True: (
        "purge the dead-letter queue of {queue!r}",
        "Delete the {size} dead job(s) of queue {queue!r} on backend {backend!r}?",
        "deleted {deleted} dead job(s) of queue {queue!r}",
    ),
}


def _purge(args: argparse.Namespace) -> int:
    """``purge`` or ``dlq purge``: ask (on a terminal, unless ``--yes``), delete, report."""
    what, question, done = _PURGE_TEXTS[args.dead]
    require_confirmation_possible(args, what.format(queue=args.queue))

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        count, purge = (queue.dlq_size, queue.dlq_purge) if args.dead else (queue.size, queue.purge)
        if not args.yes:
            size = await count(args.queue, backend=backend)
            asked = question.format(queue=args.queue, size=size, backend=backend)
            if not await confirm(args, asked):
                return EXIT_ERROR
        deleted = await showing_activity(
            progress_terminal(args.json),
            what.format(queue=args.queue).replace("purge", "purging", 1),
            lambda: purge(args.queue, backend=backend),
        )
        if args.json:
            print_json({"queue": args.queue, "backend": backend, "deleted": deleted})
        else:
            print(done.format(queue=args.queue, deleted=deleted))
        return EXIT_OK

    return with_queue(args, body)
