"""``blamequeue worker MODULE:OBJECT``: run a handler over one or more queues until SIGINT or
SIGTERM, then shut down gracefully (running handlers finish, up to ``--shutdown-timeout``)."""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import logging
import os
import reprlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from blamequeue import Consumer, Queue, __version__
from blamequeue._execution import Handler

from ._config import add_queue_options, backend_config, build_queue, load_config
from ._errors import import_failed
from ._log_format import LOG_FORMATS
from ._running import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Subparsers,
    UsageError,
    add_command,
    add_loop_option,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    run_on_loop,
    say,
)

__all__ = ["add_handler_options", "add_parser", "load_handler", "run"]

log = logging.getLogger("blamequeue.worker")


_LOG_LEVELS = ("debug", "info", "warning", "error")


_MANUAL = """\
run a handler over one or more queues until SIGINT/SIGTERM

Run the handler MODULE:OBJECT (a function, or a Queue whose registered tasks it
runs) over the given queues until SIGINT or SIGTERM, then shut down gracefully.

examples:
  blamequeue worker app.tasks:send_email --queue emails
  blamequeue worker app.tasks:send_email --queue emails --queue digests --concurrency 16
  blamequeue worker tasks:handle --queue q --path /var/lib/app/jobs.db --loop trio
  BLAMEQUEUE_PROTOCOL=redis BLAMEQUEUE_REDIS_URL=redis://localhost:6379/0 \\
      blamequeue worker app.tasks:handle --queue q
  blamequeue worker app.tasks:handle --queue q \\
      --backend-config '{"protocol": "local", "path": "jobs.db", "max_attempts": 3}'

the handler:
  async def send_email(job, ctx):      # job.payload is what was enqueued
      ...                              # return = done; raise = retry with backoff, then DLQ
  A plain `def handler(job, ctx)` runs in a worker thread (for blocking code such as an ORM).
  The current directory (or --app-dir) is put first on sys.path, as uvicorn does.

backend:
  By default the queue is built by Queue.from_env() from BLAMEQUEUE_* variables (protocol
  local, file ./blamequeue.db, unless set). --path FILE picks the SQLite file of the local
  backend; --backend-config takes one backend's config as JSON (or @file.json).

stopping:
  SIGINT (Ctrl-C) or SIGTERM stops leasing at once and lets running handlers finish, for up
  to --shutdown-timeout seconds; handlers still running then are cancelled and their jobs go
  back to pending.  A second signal does that at once.  The worker prints what it processed
  and exits 0 (130 after a second signal).
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "worker", _MANUAL, run=run)
    parser.add_argument(
        "target",
        metavar="MODULE:OBJECT",
        help="the handler to run, e.g. app.tasks:send_email (an attribute path after ':'), or "
        "a Queue, e.g. app.jobs:queue, to run its registered tasks",
    )
    parser.add_argument(
        "-q",
        "--queue",
        dest="queues",
        metavar="QUEUE",
        action="append",
        required=True,
        help="queue to consume (repeat to consume several with the same handler)",
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        type=positive_int,
        default=1,
        metavar="N",
        help="handlers running at once, per queue (default: 1)",
    )
    parser.add_argument(
        "--lease",
        type=positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds a job stays leased before another worker may take it; renewed every "
        "S/3 while its handler runs (default: 30)",
    )
    parser.add_argument(
        "--poll-interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between polls of an idle queue when nothing wakes the worker (default: 1)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=non_negative_seconds,
        default=30.0,
        metavar="S",
        help="seconds running handlers get to finish after SIGINT/SIGTERM (default: 30)",
    )
    add_queue_options(
        parser,
        backend_help=None,
        config_help="TOML file with [backends.NAME] tables (as `blamequeue jobs --help` shows); "
        "the worker consumes from its default_backend",
        backend_config=True,
    )
    add_handler_options(parser)
    parser.add_argument(
        "--log-level",
        choices=_LOG_LEVELS,
        default="info",
        help="failed jobs log at warning, each finished job at debug (default: info)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="json: every stderr line is one JSON object (time, level, logger, message, a "
        "job's job_id / queue / attempt / backend, exception) (default: text)",
    )


# -- the handler --------------------------------------------------------------------------------
def add_handler_options(parser: argparse.ArgumentParser) -> None:
    """``--app-dir`` (where :func:`load_handler` imports from) and ``--loop``."""
    parser.add_argument(
        "--app-dir",
        default=".",
        metavar="DIR",
        help="directory put first on sys.path before importing MODULE (default: .)",
    )
    add_loop_option(parser)


def load_handler(target: str, app_dir: str = ".") -> Handler:
    """Import ``MODULE:ATTR`` (``ATTR`` may be dotted) and check it can be called as
    ``handler(job, ctx)``; every mistake is a :class:`UsageError` that says what to fix."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(
            f"the handler must be given as MODULE:OBJECT (e.g. app.tasks:send_email), "
            f"got {target!r}"
        )
    directory = str(Path(app_dir).resolve())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        # Only when the module asked for (or a parent package) is missing: an import that
        # fails inside the user's module is a bug there, named as one below.
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise UsageError(
                f"cannot import module {module_name!r}: no module named {missing!r} "
                f"(searched {directory} and sys.path; run from your project directory or "
                f"pass --app-dir)"
            ) from None
        raise import_failed(module_name, exc) from exc
    except Exception as exc:
        raise import_failed(module_name, exc) from exc
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(
                f"module {module_name!r} ({getattr(module, '__file__', '?')}) has no attribute "
                f"{attr_path!r}"
            ) from None
    if isinstance(obj, Queue):
        # A Queue stands for its task registry: the worker runs its tasks by name.
        obj = obj.tasks
    if not callable(obj):
        raise UsageError(
            f"{target} is not callable (it is {type(obj).__name__} {reprlib.repr(obj)}); a "
            f"handler is a function such as `async def handler(job, ctx)`"
        )
    try:
        inspect.signature(obj).bind(None, None)
    except TypeError:
        raise UsageError(
            f"{target} cannot be called as handler(job, ctx); give it two parameters, "
            f"e.g. `async def handler(job, ctx)`"
        ) from None
    except ValueError:
        pass  # no introspectable signature (some builtins): let it run
    handler: Handler = obj
    return handler


# -- the queue ----------------------------------------------------------------------------------
def _where(args: argparse.Namespace) -> str:
    """Where the jobs live, for the banner (never credentials)."""
    if getattr(args, "config", None) is not None:
        arguments = load_config(args.config)
        backends = arguments["backends"]
        config = backends.get(arguments.get("default_backend") or next(iter(backends)), {})
        protocol = str(config.get("protocol"))
        location = config.get("path") or config.get("url") or config.get("queue_url")
    elif args.backend_config is not None:
        config = backend_config(args.backend_config)
        protocol = str(config.get("protocol"))
        location = config.get("path") or config.get("url") or config.get("queue_url")
    else:
        protocol = os.environ.get("BLAMEQUEUE_PROTOCOL", "local").strip() or "local"
        location = {
            "local": args.path or os.environ.get("BLAMEQUEUE_LOCAL_PATH") or "./blamequeue.db",
            "redis": os.environ.get("BLAMEQUEUE_REDIS_URL"),
            "sqs": os.environ.get("BLAMEQUEUE_SQS_QUEUE_URL"),
        }.get(protocol)
    if protocol == "local" and isinstance(location, str):
        location = str(Path(location).resolve())
    elif isinstance(location, str) and ("@" in location or "?" in location):
        # User info or a query string may hold a password: show the host only.
        scheme = location.partition("://")[0]
        try:
            parts = urlsplit(location)
            port = f":{parts.port}" if parts.port else ""
            location = f"{scheme}://{parts.hostname}{port}"
        except ValueError:  # the backend's own check reports the bad URL
            location = f"{scheme}://..."
    return f"{protocol} ({location})" if location else protocol


# -- running ------------------------------------------------------------------------------------
def _summary(consumers: list[Consumer], seconds: float) -> str:
    lines = []
    for consumer in consumers:
        s = consumer.stats
        text = (
            f"queue {consumer.queue_name!r}: {s.succeeded + s.failed} processed "
            f"({s.succeeded} succeeded, {s.failed} failed, {s.moved_to_dlq} to the DLQ)"
        )
        extras = [
            f"{count} {what}"
            for count, what in (
                (s.released, "released back to pending at shutdown"),
                (s.stale, "stale (lease lost to another worker)"),
                (s.unsettled, "unsettled (backend refused the outcome; back after the lease)"),
            )
            if count
        ]
        if extras:
            text += "; " + ", ".join(extras)
        lines.append(text)
    return f"blamequeue worker: stopped after {seconds:.1f} s\n  " + "\n  ".join(lines)


async def _serve(args: argparse.Namespace, queue: Queue, handler: Handler) -> int:
    started = time.monotonic()
    consumers: list[Consumer] = []
    forced = False

    async def cancel_on_second_signal(signals: AsyncIterator[int]) -> None:
        nonlocal forced
        async for signum in signals:
            forced = True
            say(
                f"blamequeue worker: {signal.Signals(signum).name} again; cancelling running "
                f"handlers, their jobs go back to pending",
                logger=log.name,
            )
            for consumer in consumers:
                consumer.abort()
            return

    # Listen before starting so a signal during start-up is not lost to the default handler.
    # The queue's own task group must nest inside ours: start() and shutdown() are called from
    # this task, inside this task group.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            await queue.start()
            try:
                for name in args.queues:
                    consumers.append(
                        await queue.consume(
                            name,
                            handler,
                            concurrency=args.concurrency,
                            lease=args.lease,
                            poll_interval=args.poll_interval,
                        )
                    )
                queues = ", ".join(repr(name) for name in args.queues)
                say(
                    f"blamequeue worker {__version__} (pid {os.getpid()}, {args.loop}): "
                    f"{args.target} on {queues}, concurrency {args.concurrency}, "
                    f"lease {args.lease:g} s, backend {_where(args)}\n"
                    f"  stop with Ctrl-C or SIGTERM",
                    logger=log.name,
                )
                async for signum in signals:
                    running = sum(consumer.in_flight for consumer in consumers)
                    say(
                        f"blamequeue worker: {signal.Signals(signum).name} received; no new "
                        f"jobs, waiting up to {args.shutdown_timeout:g} s for {running} running "
                        f"handler(s) (signal again to cancel them now)",
                        logger=log.name,
                    )
                    break
                tg.start_soon(cancel_on_second_signal, signals)
            finally:
                # Not in a shielded scope: shutdown() exits the task group start() entered, so
                # it must run at the same cancel-scope depth as start().
                await queue.shutdown(timeout=args.shutdown_timeout)
            tg.cancel_scope.cancel()
    say(_summary(consumers, time.monotonic() - started), logger=log.name)
    return EXIT_INTERRUPTED if forced else EXIT_OK


def run(args: argparse.Namespace) -> int:
    handler = load_handler(args.target, args.app_dir)
    queue = build_queue(args, must_exist=False)
    serve: Callable[[], Any] = functools.partial(_serve, args, queue, handler)
    code: int = run_on_loop(serve, args.loop)
    return code
