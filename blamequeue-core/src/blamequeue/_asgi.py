"""What the ASGI apps of core (the dashboard and the health endpoint) share: the types of an
ASGI application and the answer to the scopes that are not HTTP requests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["App", "Receive", "Scope", "Send", "serve_non_http"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def serve_non_http(scope: Scope, receive: Receive, send: Send) -> None:
    """A scope other than ``http``: a server's ``lifespan`` is told at once that startup and
    shutdown are complete (the application starts and stops the queue itself); any other
    scope (a websocket) gets nothing."""
    if scope["type"] != "lifespan":
        return
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
