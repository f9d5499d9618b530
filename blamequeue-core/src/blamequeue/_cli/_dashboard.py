"""The ``dashboard`` command: serve the web dashboard (:mod:`blamequeue._dashboard`) for the
configured backend with hypercorn, on asyncio or trio, on loopback unless told otherwise."""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import TYPE_CHECKING, TypeAlias

import anyio

from blamequeue._dashboard import create_dashboard

from ._config import CONFIG_HELP, add_queue_options, build_queue
from ._running import EXIT_OK, LOOPS, UsageError, run_on_loop, say

__all__ = ["add_parser"]

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the web dashboard (queues, jobs, DLQ, flows, batches, workers)",
        description=(
            "Serve the web dashboard on http://HOST:PORT.  Read-only unless\n"
            "BLAMEQUEUE_DASHBOARD_TOKEN is set: then DLQ retry / retry-all / purge work for\n"
            "whoever enters the token in the page.  Payloads are shown only with\n"
            "--show-payloads and the token.  Needs hypercorn (pip install 'blamequeue[dashboard]')."
        ),
        epilog=(
            "examples:\n"
            "  blamequeue dashboard\n"
            "  BLAMEQUEUE_DASHBOARD_TOKEN=... blamequeue dashboard --port 9000 --show-payloads\n"
            f"\n{CONFIG_HELP}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    parser.add_argument(
        "--show-payloads", action="store_true", help="show payloads to token holders"
    )
    parser.add_argument(
        "--audit-file",
        metavar="FILE",
        help="a JsonlAuditSink file: each job's audit events join its timeline",
    )
    parser.add_argument(
        "--loop", choices=LOOPS, default="asyncio", help="event loop to run on (default: asyncio)"
    )
    add_queue_options(parser)
    parser.set_defaults(run=_run)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run(args: argparse.Namespace) -> int:
    try:
        from hypercorn.config import Config
    except ImportError:
        raise UsageError(
            "the dashboard is served by hypercorn: pip install 'blamequeue[dashboard]'"
        ) from None
    token = os.environ.get("BLAMEQUEUE_DASHBOARD_TOKEN") or None
    queue = build_queue(args)
    app = create_dashboard(
        queue,
        token=token,
        allow_payloads=args.show_payloads,
        backend=args.backend,
        audit_file=args.audit_file,
    )
    if not _is_loopback(args.host):
        say(
            f"blamequeue dashboard: WARNING: listening on {args.host}, not loopback: anyone "
            f"who can reach it sees your queues; put it behind authentication"
        )
    config = Config()
    config.bind = [f"{args.host}:{args.port}"]
    config.accesslog = None

    async def serve() -> int:
        if args.loop == "trio":
            from hypercorn.trio import serve as serve_app
        else:
            from hypercorn.asyncio import serve as serve_app  # type: ignore[assignment]
        async with queue:
            mode = "read-write (token set)" if token else "read-only"
            say(f"blamequeue dashboard on http://{args.host}:{args.port}/ ({mode}); Ctrl-C stops")
            stop = anyio.Event()

            async def on_signal() -> None:
                import signal

                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(on_signal)
                await serve_app(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
                tg.cancel_scope.cancel()
        return EXIT_OK

    code: int = run_on_loop(serve, args.loop)
    return code
