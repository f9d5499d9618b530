"""Serve an ASGI app with hypercorn on a free loopback port, on the test's own event loop
(asyncio or trio); not a test module."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from hypercorn.config import Config


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def serving(app: Any, anyio_backend: str) -> AsyncIterator[str]:
    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    stop = anyio.Event()
    if anyio_backend == "trio":
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(app, config, shutdown_trigger=stop.wait))
        with anyio.fail_after(10):
            while True:  # until the server listens
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.02)
                    continue
                await stream.aclose()
                break
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop.set()
