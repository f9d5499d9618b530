"""The web dashboard: a plain ASGI app (no framework, no build step, no external assets) over
the inspection API, served by ``blamequeue dashboard`` or mounted in a Starlette / FastAPI app.

Read-only unless a token is configured.  Write actions (DLQ retry, retry-all, purge) need
``Authorization: Bearer <token>`` (compared in constant time) **and** the header
``X-Blamequeue-Action: 1``, which a browser cannot add to a cross-site form or image request
without a CORS preflight this app never grants (the CSRF guard); a request whose ``Origin``
names another host is refused too.  Payloads are shown only when the app was built with
``allow_payloads=True`` *and* the request carries the token.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import anyio.to_thread
import attrs

from .errors import QueueError

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["create_dashboard"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_STATUS_OF = {
    "queue/job-not-found": 404,
    "queue/bad-argument": 400,
    "queue/records-unsupported": 501,
    "queue/inspection-unsupported": 501,
    "queue/dlq-unsupported": 501,
    "queue/backend-unavailable": 503,
}


_CSP = (
    b"default-src 'self'; script-src 'unsafe-inline' 'self'; "
    b"style-src 'unsafe-inline' 'self'; connect-src 'self'; img-src 'self' data:"
)


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _jsonable(value: Any) -> Any:
    if attrs.has(type(value)):
        return _jsonable(attrs.asdict(value, recurse=False))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def create_dashboard(
    queue: Queue,
    *,
    token: str | None = None,
    allow_payloads: bool = False,
    backend: str | None = None,
    audit_file: str | None = None,
) -> App:
    """An ASGI app showing ``queue``'s backend (``backend``, default the queue's default):
    queues with counts and throughput, jobs, DLQ (with actions when ``token`` is set),
    flows, batches, schedules and workers.  ``audit_file``: a :class:`~blamequeue.
    JsonlAuditSink` file whose events of a job join its timeline.  The queue must be started
    by its owner."""
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise QueueError(
            "queue/invalid-config",
            "the dashboard token must be at least 16 characters (it guards write actions); "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
        )
    page = resources.files("blamequeue").joinpath("dashboard.html").read_bytes()

    def authorised(headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        return (
            token is not None
            and given.startswith("Bearer ")
            and hmac.compare_digest(given[7:].encode(), token.encode())
        )

    async def overview() -> Any:
        counts = await queue.queues(backend=backend)
        out = []
        for info in counts:
            entry = _jsonable(info)
            entry["size"] = info.size
            try:
                metrics = await queue.metrics(info.name, window=3600, backend=backend)
                entry["throughput"] = [m.succeeded for m in metrics.minutes]
                entry["failed_per_minute"] = [m.failed for m in metrics.minutes]
                entry["error_rate"] = metrics.error_rate
            except QueueError:
                entry["throughput"] = None  # e.g. sqs keeps no metrics
            out.append(entry)
        workers = _jsonable(await queue.workers(backend=backend))
        return {
            "queues": out,
            "workers": workers,
            "backends": _jsonable(queue.list_backends()),
            "writable": token is not None,
        }

    async def job_detail(job_id: str, headers: dict[str, str]) -> Any:
        info = await queue.job_info(job_id, backend=backend)
        if info is None:
            raise _HTTPError(404, f"no job {job_id!r}")
        document = _jsonable(info)
        shown = allow_payloads and authorised(headers)
        if not shown:
            document["job"]["payload"] = None
        document["payload_shown"] = shown
        document["timeline"] = [
            {"at": document["job"]["created_at"], "what": "enqueued"},
            {"at": document["job"]["available_at"], "what": "due"},
        ] + ([{"at": document["finished_at"], "what": info.state}] if info.finished_at else [])
        if audit_file is not None:
            document["timeline"] += await anyio.to_thread.run_sync(_audit_of, audit_file, job_id)
        document["timeline"].sort(key=lambda entry: entry["at"])
        return document

    async def route(method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        parts = [unquote(p) for p in path.strip("/").split("/")][1:]  # after "api"
        if method == "GET":
            match parts:
                case ["overview"]:
                    return await overview()
                case ["queues", name, "jobs"]:
                    page_ = await queue.list_jobs(
                        name,
                        state=query.get("state") or None,
                        limit=int(query.get("limit", "50")),
                        cursor=query.get("cursor") or None,
                        backend=backend,
                    )
                    jobs = _jsonable(page_.jobs)
                    for job in jobs:
                        job["job"]["payload"] = None
                    return {"jobs": jobs, "next_cursor": page_.next_cursor}
                case ["queues", name, "dlq"]:
                    letters = _jsonable(await queue.dlq_list(name, limit=200, backend=backend))
                    for letter in letters:
                        letter["payload"] = None
                    return {"dead": letters}
                case ["jobs", job_id]:
                    return await job_detail(job_id, headers)
                case ["flows", flow_id]:
                    status = await queue.flow_status(flow_id, backend=backend)
                    nodes = []
                    for child in status.children:
                        info = await queue.job_info(child.job_id, backend=backend)
                        deps = [] if info is None else list(info.depends_on)
                        nodes.append({**_jsonable(child), "depends_on": deps})
                    return {"flow_id": flow_id, "children": nodes}
                case ["batches"]:
                    batches = await queue.batches(backend=backend)
                    return {
                        "batches": [
                            {**_jsonable(b), "progress": b.progress, "finished": b.finished}
                            for b in batches
                        ]
                    }
                case ["schedules"]:
                    return {"schedules": _jsonable(await queue.schedules())}
        if method == "POST":
            check_write(headers)
            match parts:
                case ["jobs", job_id, "retry"]:
                    return {"retried": await queue.dlq_retry(job_id, backend=backend)}
                case ["queues", name, "dlq", "retry-all"]:
                    retried = 0
                    for letter in await queue.dlq_list(name, backend=backend):
                        retried += await queue.dlq_retry(letter.job_id, backend=backend)
                    return {"retried": retried}
                case ["queues", name, "dlq", "purge"]:
                    return {"purged": await queue.dlq_purge(name, backend=backend)}
        raise _HTTPError(404 if method in ("GET", "POST") else 405, f"no route {method} {path}")

    def check_write(headers: dict[str, str]) -> None:
        if token is None:
            raise _HTTPError(403, "the dashboard is read-only: set BLAMEQUEUE_DASHBOARD_TOKEN")
        if not authorised(headers):
            raise _HTTPError(403, "a valid token is needed for this action")
        if headers.get("x-blamequeue-action") != "1":
            raise _HTTPError(403, "missing X-Blamequeue-Action header (CSRF guard)")
        origin, host = headers.get("origin"), headers.get("host")
        if origin is not None and origin.split("://", 1)[-1] != host:
            raise _HTTPError(403, "cross-origin write refused")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        query = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
        if method == "GET" and path in ("", "/"):
            await _send(send, 200, page, "text/html; charset=utf-8")
            return
        if not path.startswith("/api/"):
            await _send(send, 404, b'{"error":"not found"}', "application/json")
            return
        try:
            body = await route(method, path, query, headers)
            status = 200
        except _HTTPError as exc:
            status, body = exc.status, {"error": str(exc)}
        except QueueError as exc:
            status = _STATUS_OF.get(exc.code, 400)
            body = {"error": exc.message, "code": exc.code}
        except ValueError as exc:
            status, body = 400, {"error": str(exc)}
        await _send(send, status, json.dumps(body).encode(), "application/json")

    return app


def _audit_of(path: str, job_id: str) -> list[dict[str, Any]]:
    """The audit events of ``job_id`` in a JSON-lines audit file (a missing file: none)."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if job_id not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if event.get("job_id") == job_id:
                    out.append({"at": event["time"], "what": event["name"], "data": event["data"]})
    except FileNotFoundError:
        pass
    return out


async def _send(send: Send, status: int, body: bytes, content_type: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"content-security-policy", _CSP),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
