"""How a command serves an ASGI app of core (``dashboard``, ``metrics-serve``): with hypercorn,
on asyncio or trio, with the queue started around it, until SIGINT or SIGTERM."""

from __future__ import annotations

import ipaddress
import signal

import anyio

from blamequeue import Queue
from blamequeue._asgi import App
from blamequeue._dashboard import host_name

from ._running import EXIT_OK, UsageError, run_on_loop, say

__all__ = ["bind_host", "require_hypercorn", "serve_app", "url_of"]


def require_hypercorn(what: str) -> None:
    """Refuse (before anything is opened) when hypercorn, which serves ``what``, is absent."""
    try:
        import hypercorn  # noqa: F401
    except ImportError:
        raise UsageError(
            f"{what} is served by hypercorn: pip install 'blamequeue[dashboard]'"
        ) from None


def bind_host(value: str) -> str:
    """``--host`` as an address or host name to bind (a :class:`UsageError` when neither)."""
    try:
        return ipaddress.ip_address(value).compressed
    except ValueError:
        name = host_name(value) if ":" not in value else None
    if name is None:
        raise UsageError(
            f"--host {value!r} is not an address or host name to bind (give an IPv6 "
            f"address without brackets, e.g. --host ::1)"
        )
    return name


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve_app(
    queue: Queue, app: App, *, host: str, port: int, loop: str, banner: str, name: str
) -> int:
    """Start ``queue``, say ``banner`` once listening is set up, serve ``app`` on
    ``host:port`` until SIGINT or SIGTERM, then shut the queue down and say that ``name``
    stopped.  An address it cannot listen on is a :class:`UsageError` naming what to change."""
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None

    async def serve() -> int:
        if loop == "trio":
            from hypercorn.trio import serve as serve_with
        else:
            from hypercorn.asyncio import serve as serve_with  # type: ignore[assignment]
        async with queue:
            say(banner)
            stop = anyio.Event()

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            async def serve_until_stopped() -> None:
                try:
                    await serve_with(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
                except OSError as exc:  # the port is taken, the address is not this machine's
                    raise UsageError(
                        f"cannot listen on {config.bind[0]}: {exc.strerror or exc}; pick "
                        f"another --port (or --host)"
                    ) from exc
                finally:
                    stop.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(on_signal)
                # In a task of its own: hypercorn's asyncio server, awaited in the task that
                # started the queue, leaves that task cancelled when the queue shuts down.
                tg.start_soon(serve_until_stopped)
        say(f"{name}: stopped")
        return EXIT_OK

    code: int = run_on_loop(serve, loop)
    return code
