"""What the ASGI apps of core (the dashboard, the health and Prometheus endpoints) share: the
types of an ASGI application, the answer to the scopes that are not HTTP requests and a whole
response sent at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

__all__ = ["App", "Receive", "Scope", "Send", "read_only_method", "respond", "serve_non_http"]

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


async def read_only_method(
    scope: Scope, receive: Receive, send: Send, refusal: tuple[bytes, bytes]
) -> str | None:
    """``GET`` or ``HEAD``, the method of a request an app that only reads answers; ``None``
    when the scope was answered here: not an HTTP request (:func:`serve_non_http`), or
    another method (405 with ``refusal``, its body and content type)."""
    if scope["type"] != "http":
        await serve_non_http(scope, receive, send)
        return None
    method: str = scope.get("method", "GET")
    if method in ("GET", "HEAD"):
        return method
    await respond(send, 405, *refusal, headers=[(b"allow", b"GET, HEAD")])
    return None


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    *,
    head: bool = False,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """One uncached response with its length (``head``: the headers only, for ``HEAD``)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})
