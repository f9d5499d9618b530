"""The web dashboard: a plain ASGI app (no framework, no build step, no external assets) over
the inspection API, served by ``blamequeue dashboard`` or mounted in a Starlette / FastAPI app
(``blamequeue.dashboard_app(queue, ...)``).

What guards it, in the order a request meets it:

- **Host.** Only a request whose ``Host`` header names a loopback host (``localhost``,
  ``127.0.0.0/8``, ``::1``) or one of ``allowed_hosts`` is answered; any other, or none, gets
  421.  A web page that points its own name at this machine (DNS rebinding) sends its own name
  as ``Host``, so it is refused before anything is read.
- **Token.** Every API request, reads included, needs ``Authorization: Bearer <token>``
  (compared in constant time), else 401.  ``read_only_open=True`` lets requests that come from
  loopback to a loopback ``Host`` read without it; writes still need it.  The page itself (one
  static HTML file) is served without it: the page takes the token from its URL fragment, which
  browsers never send to a server, keeps it in ``sessionStorage`` and sends it as the header.
- **Writes** (DLQ retry, retry-all, purge, promote, rerun, cancel) are the operator's: they need the
  token (a dashboard started without one is read-only) and the header ``X-Blamequeue-Action: 1``,
  which a browser cannot add to a cross-site form or image request without a CORS preflight
  this app never grants (the CSRF guard); a request whose ``Origin`` names another host is
  refused too.  A queue-wide action names its queue twice, in the path and in the body
  (``{"queue": NAME}``), and does nothing unless both agree.
- **What is shown.** Errors as their first line (exception type and message), URL passwords
  masked; the full text only with ``?full=1`` and the token.  ``with_context`` values never
  (their keys only).  Payloads, and a done job's result, only when the app was built with
  ``allow_payloads=True`` *and* the request carries the token.  Log lines with URL passwords
  masked.

Paths are split on ``/`` as the client sent them (the ASGI ``raw_path``) and each segment is
percent-decoded once, so a queue name may hold any character (``/``, ``%``, spaces, ``?``,
``#``, any Unicode) as long as the client encodes it as one segment, as the page does with
``encodeURIComponent``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote_to_bytes

import anyio.to_thread
import attrs

from ._asgi import App, Receive, Scope, Send, serve_non_http
from ._queue_watch import QueueWatch
from ._redaction import redacted
from .errors import ConfigError, QueueError

if TYPE_CHECKING:
    from ._models import Job, JobInfo
    from ._queue import Queue

__all__ = ["dashboard_app", "host_name", "is_loopback_host"]

log = logging.getLogger("blamequeue.dashboard")


_STATUS_OF = {
    "queue/job-not-found": 404,
    "queue/bad-argument": 400,
    "queue/backend-unavailable": 503,
}


def _status_of(code: str) -> int:
    """The HTTP status of a :class:`QueueError` code: any ``queue/...-unsupported`` (a
    backend's refusal, e.g. ``queue/job-edits-unsupported``) is 501, the rest as listed, else
    400."""
    if code.endswith("-unsupported"):
        return 501
    return _STATUS_OF.get(code, 400)


_CSP = (
    b"default-src 'self'; script-src 'unsafe-inline' 'self'; "
    b"style-src 'unsafe-inline' 'self'; connect-src 'self'; img-src 'self' data:"
)

_PROMOTABLE = "only a delayed pending job can be made due now"
_RERUNNABLE = "only a done, dead or cancelled job can run again"
_CANCELLABLE = "only a pending, parked or running job can be cancelled"
_NDJSON = "application/x-ndjson"
#: The windows (seconds) the queue view's charts offer: an hour, six hours, a day.
_CHART_WINDOWS = ("3600", "21600", "86400")

_MAX_BODY = 64 * 1024
_MAX_ERROR_LINE = 500

# A DNS name or IPv4 address as a Host header may hold it (IPv6 comes in brackets).
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def host_name(value: str) -> str | None:
    """The host a ``Host`` header (or an ``--allowed-host`` value) names, normalised: lower
    case, no port, no trailing dot, IPv6 without brackets and compressed.  ``None`` when it is
    not a host name, an IPv4 or a bracketed IPv6 address with an optional numeric port."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[1:end], value[end + 1 :]
        try:
            host = ipaddress.IPv6Address(host).compressed if end > 0 else ""
        except ValueError:
            return None
    else:
        host, colon, port = value.partition(":")
        rest = colon + port
    if rest and not (rest[:1] == ":" and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    if ":" not in host:  # not IPv6
        host = host.removesuffix(".")
        if not host.isascii() or not _NAME.fullmatch(host):
            return None
    return host


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``), as :func:`host_name`
    returns it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_token(token: Any) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str) or len(token) < 16:
        raise ConfigError(
            "queue/invalid-config",
            "the dashboard token must be at least 16 characters (it guards reads and actions); "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
        )
    if not all("!" <= c <= "~" for c in token):
        raise ConfigError(
            "queue/invalid-config",
            "the dashboard token must be printable ASCII without spaces (browsers send it in "
            "a header); e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
        )
    return token


def _check_allowed_hosts(allowed_hosts: Any) -> frozenset[str]:
    if isinstance(allowed_hosts, str | bytes) or not isinstance(allowed_hosts, Iterable):
        raise ConfigError(
            "queue/invalid-config",
            f"allowed_hosts must be a list of host names, got {allowed_hosts!r}",
        )
    names = set()
    for value in allowed_hosts:
        name = host_name(value) if isinstance(value, str) else None
        if name is None:
            raise ConfigError(
                "queue/invalid-config",
                f"an allowed host must be a host name or address such as dash.example.com, "
                f"10.0.0.5 or [fd00::5] (an optional :port is ignored), got {value!r}",
            )
        names.add(name)
    return frozenset(names)


def _one_line(text: Any) -> str | None:
    """The first non-blank line of an error text (its exception type and message), cut at
    500 characters, URL passwords masked: what the dashboard shows of an error."""
    if text is None:
        return None
    for line in str(text).splitlines():
        if line.strip():
            return redacted(line.strip()[:_MAX_ERROR_LINE])
    return ""


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: a record's public fields (a payload's, result's or
    progress data's keys are all kept, ``_id`` included), times as ISO text."""
    if attrs.has(type(value)):
        fields = attrs.asdict(value, recurse=False)
        return {k: _jsonable(v) for k, v in fields.items() if not k.startswith("_")}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _shown_job(job: Job, *, payload: bool, full_error: bool) -> dict[str, Any]:
    """A job as the dashboard shows it: no payload unless ``payload``, the first line of its
    last error unless ``full_error``, and the keys of its context, never the values."""
    document: dict[str, Any] = _jsonable(attrs.evolve(job, context={}))
    document.pop("context", None)
    document["context_keys"] = sorted(str(key) for key in job.context)
    if not payload:
        document["payload"] = None
    error = job.last_error
    document["last_error"] = redacted(error) if full_error and error else _one_line(error)
    return document


def _shown_info(info: JobInfo, *, payload: bool, full_error: bool) -> dict[str, Any]:
    """A :class:`JobInfo` as the dashboard shows it (see :func:`_shown_job`)."""
    document: dict[str, Any] = _jsonable(attrs.evolve(info, job=attrs.evolve(info.job, context={})))
    document["job"] = _shown_job(info.job, payload=payload, full_error=full_error)
    document["payload_error"] = _one_line(info.payload_error)
    return document


def _segments(scope: Scope) -> list[str]:
    """The request path's segments after the app's mount point, each percent-decoded exactly
    once, from the bytes the client sent (``raw_path``): ``/api/queues/a%2Fb/jobs`` is
    ``["api", "queues", "a/b", "jobs"]``.  A server that gives no ``raw_path`` leaves only the
    decoded ``path``, where an encoded ``/`` can no longer be told apart."""
    raw = scope.get("raw_path")
    if not raw:
        raw = quote(scope.get("path", "/"), safe="/").encode("ascii")
    try:
        segments = [unquote_to_bytes(part).decode("utf-8") for part in bytes(raw).split(b"/")]
    except UnicodeDecodeError:
        raise _HTTPError(400, "the path is not UTF-8 once percent-decoded") from None
    root = str(scope.get("root_path") or "").rstrip("/").split("/")
    if segments[: len(root)] == root:
        return segments[len(root) :]
    return segments[1:]


def dashboard_app(
    queue: Queue,
    *,
    token: str | None = None,
    allow_payloads: bool = False,
    backend: str | None = None,
    audit_file: str | None = None,
    allowed_hosts: Iterable[str] = (),
    read_only_open: bool = False,
) -> App:
    """An ASGI app showing ``queue``'s backend (``backend``, default the queue's default):
    queues with counts and throughput, jobs, DLQ (with actions), flows, batches, schedules and
    workers.  The queue must be started by its owner.

    ``token`` (16+ printable ASCII characters) guards every read and action; without one,
    ``read_only_open=True`` is required, and the dashboard is then read-only.  ``allowed_hosts``:
    host names besides the loopback ones that requests may name in ``Host`` (the name a proxy
    or the browser uses to reach it).  ``read_only_open``: requests from loopback to a loopback
    ``Host`` read without the token.  ``allow_payloads``: token holders see payloads.
    ``audit_file``: a :class:`~blamequeue.JsonlAuditSink` file whose events of a job join its
    timeline.  Bad settings raise ``queue/invalid-config``."""
    token = _check_token(token)
    allowed = _check_allowed_hosts(allowed_hosts)
    if token is None and not read_only_open:
        raise ConfigError(
            "queue/invalid-config",
            "the dashboard needs a token: reading needs it as acting does (set "
            "BLAMEQUEUE_DASHBOARD_TOKEN, or pass token=...); or pass read_only_open=True "
            "(--read-only-open) to let loopback clients read without one",
        )
    page = resources.files("blamequeue").joinpath("dashboard.html").read_bytes()

    def authorised(headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        if token is None or not given.startswith("Bearer "):
            return False
        return hmac.compare_digest(given[7:].encode("latin-1"), token.encode("ascii"))

    def may_read(headers: dict[str, str], host: str, scope: Scope) -> bool:
        if authorised(headers):
            return True
        if not read_only_open or not is_loopback_host(host):
            return False
        client = scope.get("client")  # None: the server does not say (e.g. a unix socket)
        return client is None or is_loopback_host(str(client[0]))

    def check_write(headers: dict[str, str]) -> None:
        if token is None:
            raise _HTTPError(
                403,
                "actions need the operator's access (the token), and this dashboard is "
                "read-only: it was started without a token (set BLAMEQUEUE_DASHBOARD_TOKEN); "
                "nothing was done",
            )
        if not authorised(headers):
            raise _HTTPError(
                401, "this action needs the operator's access: a valid token; nothing was done"
            )
        if headers.get("x-blamequeue-action") != "1":
            raise _HTTPError(
                403,
                "this action needs the operator's access: the token and the header "
                "X-Blamequeue-Action: 1 (the CSRF guard), which is missing; nothing was done",
            )
        origin, host = headers.get("origin"), headers.get("host")
        if origin is not None and origin.split("://", 1)[-1] != host:
            raise _HTTPError(
                403,
                f"cross-origin action refused: Origin {origin!r} is not this dashboard's "
                f"host; nothing was done",
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

    async def job_detail(job_id: str, headers: dict[str, str], full: bool) -> Any:
        info = await queue.job_info(job_id, backend=backend)
        if info is None:
            raise _HTTPError(404, f"no job {job_id!r}")
        holder = authorised(headers)
        if full and not holder:
            raise _HTTPError(401, "the full error text needs the token")
        shown = allow_payloads and holder
        document = _shown_info(info, payload=shown, full_error=full)
        document["payload_shown"] = shown
        document["result_shown"] = shown and info.state == "done"
        document["result"] = document["result_error"] = None
        if document["result_shown"]:
            try:
                document["result"] = await queue.result(job_id, timeout=0, backend=backend)
            except QueueError as exc:  # pruned meanwhile, or a value JSON could not hold
                document["result_shown"] = False
                document["result_error"] = _one_line(exc.message)
        delayed = info.job.available_at.timestamp() > queue.clock.now()
        document["actions"] = {
            "promote": info.state == "pending" and delayed,
            "rerun": info.state in ("done", "dead", "cancelled"),
            "cancel": info.state in ("pending", "parked", "inflight"),
        }
        document["timeline"] = [
            {"at": document["job"]["created_at"], "what": "enqueued"},
            {"at": document["job"]["available_at"], "what": "due"},
        ] + ([{"at": document["finished_at"], "what": info.state}] if info.finished_at else [])
        if audit_file is not None:
            document["timeline"] += await anyio.to_thread.run_sync(_audit_of, audit_file, job_id)
        document["timeline"].sort(key=lambda entry: entry["at"])
        return document

    async def get(parts: list[str], query: dict[str, str], headers: dict[str, str]) -> Any:
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
                jobs = [_shown_info(info, payload=False, full_error=False) for info in page_.jobs]
                return {"jobs": jobs, "next_cursor": page_.next_cursor}
            case ["queues", name, "metrics"]:
                window = query.get("window", "3600")
                if window not in _CHART_WINDOWS:
                    raise _HTTPError(400, f"window must be one of {', '.join(_CHART_WINDOWS)}")
                figures = await queue.metrics(name, window=float(window), backend=backend)
                document = _jsonable(figures)
                # The errors' texts may quote payloads: the charts need none of them.
                document.pop("recent_errors", None)
                return document
            case ["queues", name, "dlq"]:
                letters = []
                for letter in await queue.dlq_list(name, limit=200, backend=backend):
                    entry = _jsonable(letter)
                    entry["payload"] = None
                    entry["last_error"] = _one_line(letter.last_error)
                    letters.append(entry)
                return {"queue": name, "dead": letters}
            case ["jobs", job_id]:
                return await job_detail(job_id, headers, query.get("full") == "1")
            case ["jobs", job_id, "logs"]:
                lines = await queue.job_logs(job_id, backend=backend)
                return {
                    "job_id": job_id,
                    "logs": [
                        {**_jsonable(line), "message": redacted(line.message)} for line in lines
                    ],
                }
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
        raise _HTTPError(404, "no such page of the API")

    async def post(parts: list[str], body: Any) -> Any:
        match parts:
            case ["jobs", job_id, "retry"]:
                return {"retried": await queue.dlq_retry(job_id, backend=backend)}
            case ["jobs", job_id, "promote"]:
                if not await queue.promote(job_id, backend=backend):
                    raise _HTTPError(409, await refused(job_id, "promoted", _PROMOTABLE))
                return {"job_id": job_id, "promoted": True}
            case ["jobs", job_id, "cancel"]:
                if not await queue.cancel(job_id, backend=backend):
                    raise _HTTPError(409, await refused(job_id, "cancelled", _CANCELLABLE))
                return {"job_id": job_id, "cancelled": True}
            case ["jobs", job_id, "rerun"]:
                if not await queue.rerun(job_id, backend=backend):
                    raise _HTTPError(409, await refused(job_id, "rerun", _RERUNNABLE))
                return {"job_id": job_id, "rerun": True}
            case ["queues", name, "dlq", "retry-all"]:
                confirm(name, body, "retry-all")
                return {"queue": name, "retried": await queue.dlq_retry_all(name, backend=backend)}
            case ["queues", name, "dlq", "purge"]:
                confirm(name, body, "purge")
                return {"queue": name, "purged": await queue.dlq_purge(name, backend=backend)}
        raise _HTTPError(404, "no such action")

    async def refused(job_id: str, done: str, applies_to: str) -> str:
        """Why an action on ``job_id`` changed nothing: the state it is in now."""
        info = await queue.job_info(job_id, backend=backend)
        if info is None:
            where = "gone (purged or pruned meanwhile)"
        elif info.state == "pending" and done == "promoted":
            where = "pending and already due"
        else:
            where = info.state
        return f"job {job_id!r} was not {done}: it is {where}, and {applies_to}; nothing was done"

    def confirm(name: str, body: Any, action: str) -> None:
        """A queue-wide action acts only when its body names the queue its path names."""
        named = body.get("queue") if isinstance(body, dict) else None
        if named != name:
            raise _HTTPError(
                400,
                f"a {action} must name its queue in its body as in its path "
                f'({{"queue": {json.dumps(name)}}}); nothing was done',
            )

    async def api(
        scope: Scope, receive: Receive, parts: list[str], headers: dict[str, str], host: str
    ) -> Any:
        query = {
            k: v[-1]
            for k, v in parse_qs(
                bytes(scope.get("query_string", b"")).decode("latin-1"), keep_blank_values=True
            ).items()
        }
        method = scope["method"]
        if method == "GET":
            if not may_read(headers, host, scope):
                raise _HTTPError(401, "the dashboard needs its token (Authorization: Bearer)")
            return await get(parts, query, headers)
        if method == "POST":
            check_write(headers)
            return await post(parts, await _json_body(receive))
        raise _HTTPError(405, f"{method} is not served here")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await serve_non_http(scope, receive, send)
            return
        headers: dict[str, str] = {}
        hosts = 0
        for key, value in scope.get("headers", []):
            name = bytes(key).decode("latin-1").lower()
            hosts += name == "host"
            headers[name] = bytes(value).decode("latin-1")
        host = host_name(headers["host"]) if hosts == 1 else None
        if host is None or not (is_loopback_host(host) or host in allowed):
            await _send(
                send,
                421,
                b"This dashboard does not answer for this Host (DNS rebinding guard). "
                b"Reach it by a loopback name, or start it with --allowed-host NAME.\n",
                "text/plain; charset=utf-8",
            )
            return
        try:
            parts = _segments(scope)
            if parts in ([], [""]) and scope["method"] in ("GET", "HEAD"):
                if not parts:  # the mount point without its slash: relative links need it
                    location = quote(str(scope.get("root_path") or "")) + "/"
                    await _send(send, 308, b"", "text/plain", [(b"location", location.encode())])
                    return
                head = scope["method"] == "HEAD"
                await _send(send, 200, page, "text/html; charset=utf-8", head=head)
                return
            if parts[:1] != ["api"]:
                raise _HTTPError(404, "not found")
            if len(parts) == 4 and parts[1] == "queues" and parts[3] == "events":
                # A queue's events from every process, as they come (Queue.watch): a stream
                # of JSON lines for as long as the page reads it.
                if scope["method"] != "GET":
                    raise _HTTPError(405, f"{scope['method']} is not served here")
                if not may_read(headers, host, scope):
                    raise _HTTPError(401, "the dashboard needs its token (Authorization: Bearer)")
                async with queue.watch(parts[2], backend=backend) as events:
                    await _stream_events(events, receive, send)
                return
            body = await api(scope, receive, parts[1:], headers, host)
            status = 200
        except _HTTPError as exc:
            status, body = exc.status, {"error": str(exc)}
        except QueueError as exc:
            status = _status_of(exc.code)
            body = {"error": _one_line(exc.message), "code": exc.code}
        except ValueError as exc:
            status, body = 400, {"error": _one_line(str(exc))}
        except Exception as exc:
            # The operator's log keeps the traceback; the page gets one line.
            log.exception("dashboard request failed")
            status = 500
            body = {"error": f"internal error ({type(exc).__name__}): see the dashboard's log"}
        extra = [(b"www-authenticate", b'Bearer realm="blamequeue"')] if status == 401 else []
        encoded = json.dumps(body, default=str).encode()
        await _send(send, status, encoded, "application/json", extra)

    return app


async def _json_body(receive: Receive) -> Any:
    """The request body parsed as JSON (``None`` when empty); 413 past 64 KiB."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > _MAX_BODY:
            raise _HTTPError(413, "the request body is larger than 64 KiB")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise _HTTPError(400, "the request body is not JSON") from None


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


async def _send(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    head: bool = False,
) -> None:
    """Answer with ``body`` (only its length for a ``HEAD`` request)."""
    headers = [
        (b"content-length", str(len(body)).encode()),
        *_headers(content_type),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def _headers(content_type: str) -> list[tuple[bytes, bytes]]:
    """What every answer of the dashboard carries besides its length."""
    return [
        (b"content-type", content_type.encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"no-referrer"),
        (b"content-security-policy", _CSP),
    ]


async def _stream_events(events: QueueWatch, receive: Receive, send: Send) -> None:
    """Send ``events`` as JSON lines until the client goes away (the watch is already open,
    so nothing raised after the page asked is missed)."""
    await send({"type": "http.response.start", "status": 200, "headers": _headers(_NDJSON)})
    await send({"type": "http.response.body", "body": b"", "more_body": True})
    async with anyio.create_task_group() as tg:

        async def until_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(until_gone)
        try:
            async for event in events:
                line = {
                    "name": event.name,
                    "job_id": event.job_id,
                    "at": event.at.isoformat(),
                    "data": _jsonable(dict(event.data)),
                }
                await send({"type": "http.response.body", "body": _line(line), "more_body": True})
        except QueueError as exc:  # the answer has begun: its last line says what went wrong
            error = {"error": _one_line(exc.message), "code": exc.code}
            await send({"type": "http.response.body", "body": _line(error)})
            tg.cancel_scope.cancel()


def _line(document: Any) -> bytes:
    return json.dumps(document, default=str).encode() + b"\n"
