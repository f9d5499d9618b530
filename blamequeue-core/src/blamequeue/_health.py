"""Health checks: ``await queue.health(...)`` and an ASGI app answering 200 / 207 / 503.

A report reads, per backend: its breaker, every queue's counts, delayed jobs and latency
(:meth:`Backend.queue_stats`), the error rate from the backend-kept metrics, and the live
workers.  Each figure past its threshold raises an alert, ``warning`` when past it and
``critical`` when ``critical_factor`` times past it (or when a backend cannot be reached, or a
queue with due jobs has no worker at all while workers are required); the report is
``unhealthy`` with any critical alert, ``degraded`` with any warning, else ``healthy``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

import attrs

from ._asgi import App, Receive, Scope, Send, read_only_method, respond
from ._clock import to_datetime
from ._inspection import to_queue_info, to_worker_info
from ._metrics import check_window, read_metrics
from ._models import BackendStatus, BreakerState, QueueInfo, WorkerInfo
from ._presence import LIVE_FOR
from ._runtime import BackendRuntime
from ._validation import MAX_SECONDS
from .abc import Inspection, QueueStats, WorkerRecord
from .errors import BadArgumentError, QueueError

__all__ = [
    "HealthAlert",
    "HealthReport",
    "HealthStatus",
    "HealthThresholds",
    "QueueFigures",
    "QueueHealth",
    "check_report",
    "health_app",
    "read_figures",
]

HealthStatus = Literal["healthy", "degraded", "unhealthy"]
AlertLevel = Literal["warning", "critical"]

_HTTP_STATUS: dict[HealthStatus, int] = {"healthy": 200, "degraded": 207, "unhealthy": 503}


def _optional_limit(kind: type, low: float, high: float = math.inf) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and attribute.name != "critical_factor":
            return
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if kind is int:
            ok = ok and isinstance(value, int)
        # isfinite() of an int too large for a float raises: compare such an int as it is.
        finite = not isinstance(value, float) or math.isfinite(value)
        if not ok or not finite or not low <= value <= high:
            raise BadArgumentError(
                "queue/bad-argument",
                f"HealthThresholds.{attribute.name} must be "
                f"{'an int' if kind is int else 'a number'} between {low} and {high}"
                f"{' or None' if attribute.name != 'critical_factor' else ''}, got {value!r}",
            )

    return check


@attrs.frozen(kw_only=True)
class HealthThresholds:
    """When a queue stops being healthy.  ``None`` switches a check off."""

    max_pending: int | None = attrs.field(default=None, validator=_optional_limit(int, 0))
    """Due pending jobs per queue."""
    max_oldest_age: float | None = attrs.field(
        default=300.0, validator=_optional_limit(float, 0, MAX_SECONDS)
    )
    """Seconds the longest-waiting due job has waited."""
    max_error_rate: float | None = attrs.field(default=0.25, validator=_optional_limit(float, 0, 1))
    """Failed attempts / attempts over ``error_window`` (needs shared records)."""
    max_dead: int | None = attrs.field(default=None, validator=_optional_limit(int, 0))
    """Jobs in the queue's DLQ."""
    min_workers: int | None = attrs.field(default=None, validator=_optional_limit(int, 1))
    """Live workers each queue holding due jobs should have."""
    error_window: float = attrs.field(default=300.0)
    """Seconds of metrics the error rate covers (60 s to 24 h)."""
    critical_factor: float = attrs.field(default=2.0, validator=_optional_limit(float, 1))
    """A figure this many times past its threshold is critical, not a warning."""

    def __attrs_post_init__(self) -> None:
        check_window(self.error_window)


@attrs.frozen(kw_only=True)
class HealthAlert:
    level: AlertLevel
    backend: str
    queue: str | None
    check: str
    """What crossed its threshold: ``pending``, ``oldest_job_age``, ``error_rate``, ``dead``,
    ``workers`` or ``backend``."""
    message: str
    value: float | None = None
    threshold: float | None = None


@attrs.frozen(kw_only=True)
class QueueHealth:
    name: str
    backend: str
    status: HealthStatus
    pending: int
    """Pending jobs that are due (delayed ones are counted apart)."""
    delayed: int
    inflight: int
    parked: int
    dead: int
    oldest_job_age: float | None
    """Seconds the longest-waiting due job has waited (``None``: none is due)."""
    error_rate: float | None
    """Over the thresholds' ``error_window``; ``None`` on a backend without shared records."""
    workers: int


@attrs.frozen(kw_only=True)
class HealthReport:
    """What :meth:`Queue.health` found (``status``, per queue, workers, alerts)."""

    status: HealthStatus
    checked_at: datetime
    queues: Sequence[QueueHealth]
    workers: Sequence[WorkerInfo]
    alerts: Sequence[HealthAlert]
    backends: Sequence[BackendStatus]

    @property
    def http_status(self) -> int:
        """200 healthy, 207 degraded, 503 unhealthy."""
        return _HTTP_STATUS[self.status]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (times as ISO 8601 strings)."""
        out: dict[str, Any] = _jsonable(attrs.asdict(self, recurse=True))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _status(alerts: Sequence[HealthAlert]) -> HealthStatus:
    if any(a.level == "critical" for a in alerts):
        return "unhealthy"
    return "degraded" if alerts else "healthy"


def _past(
    alerts: list[HealthAlert],
    thresholds: HealthThresholds,
    *,
    backend: str,
    queue: str,
    check: str,
    value: float | None,
    limit: float | None,
    what: str,
) -> None:
    if value is None or limit is None or value <= limit:
        return
    critical = value >= limit * thresholds.critical_factor and value > limit
    alerts.append(
        HealthAlert(
            level="critical" if critical else "warning",
            backend=backend,
            queue=queue,
            check=check,
            message=f"queue {queue!r}: {what} is {value:g}, above {limit:g}",
            value=value,
            threshold=limit,
        )
    )


@attrs.frozen(kw_only=True)
class QueueFigures:
    """What a backend holds for one queue now (health checks, the Prometheus endpoint)."""

    info: QueueInfo
    stats: QueueStats
    oldest_age: float | None
    """Seconds the longest-waiting due job has waited (``None``: none is due)."""
    workers: int
    """Live workers consuming the queue."""

    @property
    def due(self) -> int:
        """Pending jobs that are due (``info.pending`` counts the delayed ones too)."""
        return self.info.pending - self.stats.delayed


async def read_figures(
    runtime: BackendRuntime, now: float
) -> tuple[list[QueueFigures], list[WorkerRecord]]:
    """Every queue holding jobs (by name) and the live workers, of an inspection backend."""
    backend = Inspection.of(runtime.backend)
    counts = await runtime.call("queue_counts", backend.queue_counts)
    records = await runtime.call(
        "list_workers", lambda: backend.list_workers(alive_since=now - LIVE_FOR)
    )
    per_queue: dict[str, int] = {}
    for record in records:
        per_queue[record.queue] = per_queue.get(record.queue, 0) + 1
    figures = []
    for name in sorted(counts):
        stats = await runtime.call(
            "queue_stats", functools.partial(backend.queue_stats, name, now=now)
        )
        figures.append(
            QueueFigures(
                info=to_queue_info(runtime.name, name, counts[name]),
                stats=stats,
                oldest_age=None
                if stats.oldest_due_at is None
                else max(0.0, now - stats.oldest_due_at),
                workers=per_queue.get(name, 0),
            )
        )
    return figures, records


async def _backend_health(
    runtime: BackendRuntime, thresholds: HealthThresholds, now: float
) -> tuple[list[QueueHealth], list[WorkerInfo], list[HealthAlert]]:
    alerts: list[HealthAlert] = []
    figures, records = await read_figures(runtime, now)
    workers = [to_worker_info(runtime.name, record) for record in records]
    queues: list[QueueHealth] = []
    for figure in figures:
        info, stats, name = figure.info, figure.stats, figure.info.name
        error_rate = None
        if runtime.backend.capabilities.records:
            error_rate = (await read_metrics(runtime, name, thresholds.error_window)).error_rate
        due, age = figure.due, figure.oldest_age
        mine: list[HealthAlert] = []
        common = {"backend": runtime.name, "queue": name}
        _past(mine, thresholds, **common, check="pending", value=due,
              limit=thresholds.max_pending, what="the number of due pending jobs")  # fmt: skip
        _past(mine, thresholds, **common, check="oldest_job_age", value=age,
              limit=thresholds.max_oldest_age, what="the oldest due job's wait (s)")  # fmt: skip
        _past(mine, thresholds, **common, check="error_rate", value=error_rate,
              limit=thresholds.max_error_rate, what="the error rate")  # fmt: skip
        _past(mine, thresholds, **common, check="dead", value=info.dead,
              limit=thresholds.max_dead, what="the number of dead jobs")  # fmt: skip
        live = figure.workers
        wanted = thresholds.min_workers
        if wanted is not None and due > 0 and live < wanted:
            mine.append(
                HealthAlert(
                    level="critical" if live == 0 else "warning",
                    backend=runtime.name,
                    queue=name,
                    check="workers",
                    message=f"queue {name!r} has {due} due job(s) and {live} live worker(s), "
                    f"fewer than {wanted}",
                    value=live,
                    threshold=wanted,
                )
            )
        alerts += mine
        queues.append(
            QueueHealth(
                name=name,
                backend=runtime.name,
                status=_status(mine),
                pending=due,
                delayed=stats.delayed,
                inflight=info.inflight,
                parked=info.parked,
                dead=info.dead,
                oldest_job_age=age,
                error_rate=error_rate,
                workers=live,
            )
        )
    return queues, workers, alerts


def _critical(runtime: BackendRuntime, check: str, what: str) -> HealthAlert:
    """A critical alert about a whole backend."""
    return HealthAlert(
        level="critical",
        backend=runtime.name,
        queue=None,
        check=check,
        message=f"backend {runtime.name!r}: {what}",
    )


async def check_report(
    runtimes: Sequence[BackendRuntime], thresholds: HealthThresholds, now: float
) -> HealthReport:
    queues: list[QueueHealth] = []
    workers: list[WorkerInfo] = []
    alerts: list[HealthAlert] = []
    statuses: list[BackendStatus] = []
    for runtime in runtimes:
        breaker: BreakerState = runtime.guard.breaker.state  # type: ignore[assignment]
        statuses.append(
            BackendStatus(name=runtime.name, protocol=runtime.protocol, breaker_state=breaker)
        )
        if runtime.missing_seal_key is not None:
            alerts.append(
                _critical(
                    runtime,
                    "seal-key",
                    f"jobs are sealed with key id {runtime.missing_seal_key!r}, which this "
                    f"process does not hold; it leases nothing until restarted with that key",
                )
            )
        if not runtime.backend.capabilities.inspection:
            continue  # e.g. sqs: it cannot list its queues; only its breaker is reported
        try:
            q, w, a = await _backend_health(runtime, thresholds, now)
        except QueueError as exc:
            alerts.append(_critical(runtime, "backend", f"could not be checked: {exc}"))
            continue
        queues += q
        workers += w
        alerts += a
    return HealthReport(
        status=_status(alerts),
        checked_at=to_datetime(now),
        queues=queues,
        workers=workers,
        alerts=alerts,
        backends=statuses,
    )


class HealthSource(Protocol):
    """What the health app asks of a queue (a :class:`Queue`): its report."""

    async def health(
        self, thresholds: HealthThresholds | None = None, *, backend: str | None = None
    ) -> HealthReport: ...


def health_app(
    queue: HealthSource, thresholds: HealthThresholds | None = None, *, backend: str | None = None
) -> App:
    """An ASGI app answering every ``GET`` / ``HEAD`` with the queue's health report as
    JSON: ``200`` healthy, ``207`` degraded, ``503`` unhealthy (also when the queue is not
    started).  Mount it at a path of your Starlette / FastAPI app, or serve it alone::

        app = blamequeue.health_app(queue, HealthThresholds(max_oldest_age=60))

    The queue must be started by the application (e.g. in its lifespan).
    """
    limits = thresholds if thresholds is not None else HealthThresholds()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        method = await read_only_method(scope, receive, send, _REFUSAL)
        if method is None:
            return
        try:
            report = await queue.health(limits, backend=backend)
            status, body = report.http_status, report.to_dict()
        except QueueError as exc:
            status, body = 503, {"status": "unhealthy", "error": str(exc), "code": exc.code}
        await _respond(send, status, body, head=method == "HEAD")

    return app


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


_REFUSAL = (_json({"error": "use GET or HEAD"}), b"application/json")


async def _respond(send: Send, status: int, body: dict[str, Any], *, head: bool) -> None:
    await respond(send, status, _json(body), b"application/json", head=head)
