"""The public value types: what a handler, a tick and an operator get back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs

from ._validation import MAX_SECONDS_TEXT, is_duration
from .abc import DependencyPolicy, JobState

__all__ = [
    "BackendStatus",
    "DeadLetter",
    "FlowChild",
    "FlowChildStatus",
    "FlowJob",
    "FlowResult",
    "FlowStatus",
    "Job",
    "JobInfo",
    "JobLogLine",
    "JobPage",
    "JobProgress",
    "QueueInfo",
    "RateLimit",
    "TickResult",
    "WorkerInfo",
]

BreakerState = Literal["closed", "open", "half-open"]


@attrs.frozen(kw_only=True)
class Job:
    """One job as a handler sees it.

    ``attempts`` counts this attempt too (the first run sees 1).  Times are UTC-aware.
    """

    id: str
    queue: str
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    classification: str | None
    trace_id: str | None
    created_at: datetime
    available_at: datetime
    last_error: str | None
    flow_id: str | None = None
    task: str | None = None
    """The task name, for jobs dispatched as tasks (``queue.job(...)``, ``Task.dispatch``)."""
    context: Mapping[str, Any] = attrs.field(factory=dict)
    """The values the dispatcher attached with ``with_context(...)``."""
    group_key: str | None = None
    """The group it was enqueued in (``enqueue(..., group_key=...)``), if any."""

    @property
    def job_id(self) -> str:
        """The same as :attr:`id`: every value that describes a job answers ``job_id``
        (:class:`DeadLetter`, :class:`FlowJob`, events, audit records, log records)."""
        return self.id


@attrs.frozen(kw_only=True)
class JobProgress:
    """The last progress a job's handler reported (``ctx.progress(percent, data)``), kept on the
    job (:attr:`JobInfo.progress`) so a reader that comes late still sees where it stands."""

    percent: float
    """0 to 100."""
    data: Any = None
    """The ``data`` passed with it (JSON)."""
    time: datetime
    """When it was reported (UTC)."""


@attrs.frozen(kw_only=True)
class JobLogLine:
    """One line of a job's log (``ctx.log(message)``), as :meth:`Queue.job_logs` returns it."""

    time: datetime
    """When the handler wrote it (UTC)."""
    attempt: int
    """The number of the attempt that wrote it (1 for the first run)."""
    message: str


@attrs.frozen(kw_only=True)
class JobInfo:
    """A job and where it stands: what :meth:`Queue.job_info` and :meth:`Queue.list_jobs`
    return to operators (a handler gets the bare :class:`Job`)."""

    job: Job
    state: JobState
    """``pending`` (delayed ones too), ``inflight``, ``parked`` (a flow child waiting for its
    dependencies), ``done`` (kept ``retain_done`` seconds), ``dead`` (in the DLQ) or
    ``cancelled`` (by :meth:`Queue.cancel`; kept like ``done``)."""
    backend: str
    """The name of the backend holding it."""
    finished_at: datetime | None = None
    """When it became ``done``, ``dead`` or ``cancelled``."""
    depends_on: tuple[str, ...] = ()
    """Ids of the flow siblings it waits for."""
    payload_error: str | None = None
    """Why ``job.payload`` is ``None``: the stored payload could not be unsealed."""
    progress: JobProgress | None = None
    """The last progress its handler reported, or ``None`` (never reported, or a backend
    that keeps no records)."""

    @property
    def job_id(self) -> str:
        """The job's id (``info.job.id``), named as on every value that describes a job."""
        return self.job.id


@attrs.frozen(kw_only=True)
class JobPage:
    """One page of :meth:`Queue.list_jobs`; pass ``next_cursor`` back for the next one."""

    jobs: list[JobInfo]
    next_cursor: str | None = None
    """``None`` on the last page."""


@attrs.frozen(kw_only=True)
class QueueInfo:
    """One queue of a backend and how many jobs it holds in each state."""

    name: str
    backend: str
    pending: int = 0
    inflight: int = 0
    parked: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0

    @property
    def size(self) -> int:
        """Live jobs, as :meth:`Queue.size` counts them: pending + inflight + parked."""
        return self.pending + self.inflight + self.parked


@attrs.frozen(kw_only=True)
class WorkerInfo:
    """A live consumer, as it last reported itself in the backend's worker registry."""

    id: str
    backend: str
    queue: str
    host: str
    pid: int
    concurrency: int
    started_at: datetime
    last_heartbeat: datetime
    in_flight: int
    """Handlers running at the last heartbeat."""
    succeeded: int
    failed: int
    """Failed attempts (retried or dead-lettered) since it started."""


@attrs.frozen(kw_only=True)
class DeadLetter:
    """A job that ran out of attempts and waits in the dead-letter queue for an operator."""

    job_id: str
    queue: str
    payload: Any
    attempts: int
    last_error: str | None
    trace_id: str | None
    classification: str | None
    failed_at: datetime

    @property
    def id(self) -> str:
        """The same as :attr:`job_id`, named as on :class:`Job`: code handling both a job and
        a dead letter may read ``.id`` of either (and ``.job_id`` of either)."""
        return self.job_id


@attrs.frozen(kw_only=True)
class TickResult:
    """What one :meth:`Queue.tick` did.

    Each leased job counts in exactly one of ``succeeded``, ``failed``, ``stale``, ``unsettled``
    and ``deferred``; ``moved_to_dlq`` is the part of ``failed`` that went to the dead-letter
    queue.  ``deferred`` counts jobs whose handler raised :class:`~blamequeue.RetryLater` (or
    :class:`~blamequeue.RateLimited`): back to pending later, the attempt given back.
    ``stale`` is benign (another worker owns the job now); ``unsettled`` means the backend refused
    to record the outcome and the job will come back after its lease: worth an alert.
    Loop on ``may_have_more``, not on ``queue_depth`` (which counts delayed jobs too and is
    ``None`` when the backend could not be asked).
    """

    leased: int = 0
    succeeded: int = 0
    failed: int = 0
    stale: int = 0
    unsettled: int = 0
    moved_to_dlq: int = 0
    may_have_more: bool = False
    queue_depth: int | None = None
    deferred: int = 0


@attrs.frozen(kw_only=True)
class BackendStatus:
    """One configured backend and the state of its circuit breaker."""

    name: str
    protocol: str
    breaker_state: BreakerState


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise _bad(
            f"RateLimit.{attribute.name} must be a positive integer, at most 2**31 - 1 (every "
            f"store keeps it as an integer), got {value!r}"
        )


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not is_duration(value, positive=True):
        raise _bad(
            f"RateLimit.{attribute.name} must be a positive number of seconds, at most "
            f"{MAX_SECONDS_TEXT}, got {value!r}"
        )


def _bad(message: str) -> Exception:
    from .errors import BadArgumentError

    return BadArgumentError("queue/bad-argument", message)


@attrs.frozen(kw_only=True)
class RateLimit:
    """At most ``max`` handler starts per ``per_seconds``, per consumer."""

    max: int = attrs.field(validator=_positive_int)
    per_seconds: float = attrs.field(validator=_positive_seconds)

    @classmethod
    def coerce(
        cls, value: RateLimit | Mapping[str, Any] | None, what: str = "rate_limit"
    ) -> RateLimit | None:
        if value is None or isinstance(value, RateLimit):
            return value
        if isinstance(value, Mapping):
            try:
                return cls(**value)
            except TypeError as exc:
                keys = sorted(map(repr, value))
                message = f"{what} takes the keys 'max' and 'per_seconds', got {keys}"
                raise _bad(message) from exc
        raise _bad(f"{what} must be a RateLimit or a mapping, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class FlowChild:
    """One node of a flow (see :meth:`Queue.enqueue_flow`).

    ``queue_name``: the queue the child's job goes to, another queue of the flow's backend;
    ``None`` (the default) puts it on the flow's queue.  ``on_dependency_failure``: what the
    child does while it waits and a job it depends on ends dead (out of attempts,
    ``UnrecoverableError``, an expired last lease) or cancelled: ``"wait"`` (the default)
    stays parked, to run should that job be retried and complete; ``"fail"`` is dead-lettered
    at once, its last error naming that job; ``"ignore"`` goes on as if that job were done.
    """

    name: str
    payload: Any = None
    depends_on: Sequence[str] = ()
    priority: int = 0
    max_attempts: int | None = None
    classification: str | None = None
    trace_id: str | None = None
    queue_name: str | None = None
    on_dependency_failure: DependencyPolicy = "wait"


@attrs.frozen(kw_only=True)
class FlowJob:
    """One child of a registered flow: its name and the id of its job."""

    name: str
    job_id: str


@attrs.frozen(kw_only=True)
class FlowResult:
    """What :meth:`Queue.enqueue_flow` registered: the flow's id and its jobs in declaration
    order."""

    flow_id: str
    jobs: list[FlowJob]


@attrs.frozen(kw_only=True)
class FlowChildStatus:
    """One child of a flow and the state its job is in now."""

    name: str
    job_id: str
    state: JobState
    """``parked`` (waiting for its dependencies), ``pending``, ``inflight``, ``done``,
    ``dead`` or ``cancelled``."""


@attrs.frozen(kw_only=True)
class FlowStatus:
    """What :meth:`Queue.flow_status` found of a flow.

    ``children`` lists the children **still stored**, in declaration order.  A ``done`` child
    is kept for the backend's ``retain_done`` seconds and then pruned, so a child missing here
    has finished (or was purged).
    """

    flow_id: str
    children: list[FlowChildStatus]

    @property
    def states(self) -> dict[str, JobState]:
        """Each stored child's state, by name."""
        return {child.name: child.state for child in self.children}
