"""The values a backend receives and returns (re-exported by :mod:`blamequeue.abc`, the backend
contract, where they are documented for backend authors)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, Protocol, TypeVar

import attrs

JobState = Literal["pending", "inflight", "done", "dead", "parked", "cancelled"]
Outcome = Literal["done", "retry", "dead", "release"]
DependencyPolicy = Literal["wait", "fail", "ignore"]
"""What a parked flow job does when a job it depends on ends ``dead`` or ``cancelled``
(:attr:`NewJob.on_dependency_failure`)."""

#: Every :data:`DependencyPolicy`, the default first.
DEPENDENCY_POLICIES: tuple[DependencyPolicy, ...] = ("wait", "fail", "ignore")

#: Every state, in the order :meth:`Backend.list_jobs` lists them (a job's lifecycle order).
JOB_STATES: tuple[JobState, ...] = ("pending", "inflight", "parked", "done", "dead", "cancelled")

#: The states in which a job holds its unique key (:meth:`Backend.enqueue_unique`): waiting to
#: run (delayed and between retries included) or running.  A state added later in which a job
#: still waits to run belongs here.
UNIQUE_HOLDING_STATES: tuple[JobState, ...] = ("pending", "inflight")


class Clock(Protocol):
    """Where the queue reads time.  ``blamequeue_testing.VirtualClock`` implements it too."""

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` of this clock's time have passed."""
        ...


@attrs.frozen(kw_only=True)
class BackendContext:
    """What the queue hands a backend when it builds it."""

    name: str
    """The operator's name for this backend (``"primary"``)."""
    clock: Clock


@attrs.frozen(kw_only=True)
class NewJob:
    """A job to store in state ``pending`` (or ``parked`` when ``parked`` is true)."""

    id: str
    queue: str
    payload: str
    priority: int
    max_attempts: int
    created_at: float
    available_at: float
    classification: str | None = None
    trace_id: str | None = None
    meta: str | None = None
    flow_id: str | None = None
    depends_on: tuple[str, ...] = ()
    """Ids of jobs (of the same flow) that must be ``done`` before this one may run."""
    parked: bool = False
    """Store as ``parked`` instead of ``pending``: it waits for ``depends_on``."""
    on_dependency_failure: DependencyPolicy = "wait"
    """What this parked job does when a job of its ``depends_on`` ends ``dead`` or
    ``cancelled`` (``Capabilities.flow_policies`` only; the core sends ``"wait"`` to other
    backends): ``"wait"`` stays parked (a dead dependency may still be retried and
    complete); ``"fail"`` becomes ``dead`` at once, with ``finished_at`` the dependency's and
    the dependency's :attr:`dependants_error` as its ``last_error``; ``"ignore"`` counts a
    ``dead`` or ``cancelled`` dependency as done (released once every other one is done too).
    """
    dependants_error: str | None = None
    """The ``last_error`` a dependant of this job with ``on_dependency_failure="fail"`` gets
    when this job ends ``dead`` or ``cancelled``: plain text written by the core (names and
    ids only), stored with the job and copied verbatim.  ``None`` when no dependant fails."""
    group_key: str | None = None
    """The job's group for :attr:`LeaseLimits.group_concurrency` (``Capabilities.group_limits``
    only; the core never sends one to other backends)."""
    lifo: bool = False
    """Lease it ahead of the due jobs of its priority already waiting, whenever it is due (its
    retries too): see the leasing order of :meth:`Backend.lease` (``Capabilities.lifo`` only;
    the core never sends ``True`` to other backends)."""


@attrs.frozen(kw_only=True)
class StoredJob:
    """A job as the backend holds it."""

    id: str
    queue: str
    state: JobState
    payload: str
    priority: int
    attempts: int
    max_attempts: int
    created_at: float
    available_at: float
    classification: str | None = None
    trace_id: str | None = None
    last_error: str | None = None
    meta: str | None = None
    flow_id: str | None = None
    depends_on: tuple[str, ...] = ()
    finished_at: float | None = None
    """When the job became ``done``, ``dead`` or ``cancelled``."""
    group_key: str | None = None
    """As enqueued (:attr:`NewJob.group_key`)."""
    result: str | None = None
    """The :attr:`Settlement.result` of its ``done`` settlement (``Capabilities.results``)."""


@attrs.frozen(kw_only=True)
class Lease:
    """One leased job: the backend moved it to ``inflight`` and bumped ``attempts``."""

    job: StoredJob
    token: str
    """Fences settlement: only this token may settle or extend the lease."""
    expires_at: float


@attrs.frozen(kw_only=True)
class LeaseLimits:
    """Fleet-wide limits one :meth:`Backend.lease_limited` call must respect (already checked
    by the core: positive numbers, at least one limit set).

    * ``rate_max`` / ``rate_per_seconds``: a token bucket per queue kept **in the store** and
      shared by every process: it holds at most ``rate_max`` tokens and refills at
      ``rate_max / rate_per_seconds`` tokens a second, measured on the ``now`` of each call
      (never the system clock).  A bucket never seen before starts full.  Each leased job
      takes one token; a call leases at most as many jobs as whole tokens are left after
      refilling (zero is a valid answer).  A ``now`` earlier than the bucket's last refill
      (clocks of two processes) refills nothing.
    * ``group_concurrency``: at most this many ``inflight`` jobs per ``group_key`` of the
      queue, counting the jobs of every process and of this call.  A due job whose group is
      at its limit is skipped and the next eligible job in leasing order is taken instead;
      jobs without a group are not limited.
    """

    rate_max: int | None = None
    rate_per_seconds: float | None = None
    group_concurrency: int | None = None


@attrs.frozen(kw_only=True)
class Settlement:
    """The outcome of one attempt, to apply if and only if ``token`` still owns the job.

    * ``done``: the job is finished at ``at``; kept as ``done`` when ``keep`` is true (retention),
      else deleted at once.  In the same atomic step, every ``parked`` job whose
      ``depends_on`` are now all ``done`` (or gone: deleted done jobs count as done) becomes
      ``pending``, due at ``at`` (flows; only backends with ``Capabilities.flows``).
    * ``retry``: back to ``pending``, due at ``at``, with ``error`` as its last error.
    * ``dead``: to the dead-letter queue, ``finished_at = at``, with ``error``; with
      ``Capabilities.flow_policies`` the jobs parked behind it follow their
      :attr:`NewJob.on_dependency_failure` in the same atomic step.
    * ``release``: back to ``pending`` due at ``at`` with the attempt given back
      (``attempts -= 1``); used when a worker shuts down mid-attempt.
    """

    job_id: str
    token: str
    outcome: Outcome
    at: float
    error: str | None = None
    keep: bool = True
    result: str | None = None
    """``done`` only: the handler's return value, encoded (and sealed) by the core, opaque to
    the backend; ``None`` when the handler returned ``None``.  A backend with
    ``Capabilities.results`` stores it with the kept ``done`` job, in the same atomic step."""


@attrs.frozen(kw_only=True)
class CancelOutcome:
    """What one :meth:`Backend.cancel` found and did."""

    job: StoredJob
    """The job as stored after the call."""
    cancelled: bool
    """True when this call moved the job to ``cancelled``; False when it had already finished
    (``done``, ``dead`` or ``cancelled``) and nothing changed."""


@attrs.frozen(kw_only=True)
class EditOutcome:
    """What one edit of a stored job (:class:`~blamequeue.abc.JobEdits`) found and did."""

    job: StoredJob
    """The job as stored after the call."""
    applied: bool
    """True when this call changed the job; False when its state did not allow the edit and
    nothing changed."""
    was: JobState
    """The job's state before the call."""


@attrs.frozen(kw_only=True)
class Retention:
    """How long, and how many, finished jobs a backend keeps beyond ``retain_done`` (SPEC
    §3.12), from the backend options ``retain_dead``, ``retain_done_count`` and
    ``retain_dead_count`` (checked by the core): what :meth:`RetentionLimits.prune_finished`
    applies.  ``None`` everywhere (the default) is no limit.

    ``cancelled`` jobs are kept like ``done`` ones: ``done_count`` counts a queue's ``done``
    and ``cancelled`` jobs as one pool.  "Most recently finished" is by ``finished_at`` (a
    cancelled job's is when it was cancelled); jobs finished at the very same time are ordered
    as the backend likes.
    """

    dead: float | None = None
    """Seconds a ``dead`` job is kept after it finished; ``None``: until it is retried or
    purged.  0: the next sweep deletes every dead job."""
    done_count: int | None = None
    """Keep at most this many ``done`` and ``cancelled`` jobs per queue, the most recently
    finished; ``None``: no limit.  0 keeps none (a completed job is deleted at once, a
    cancelled one by the next sweep)."""
    dead_count: int | None = None
    """Keep at most this many ``dead`` jobs per queue, the most recently finished; ``None``:
    no limit.  0 keeps none (the next sweep deletes them)."""

    @property
    def limited(self) -> bool:
        """Whether any limit is set (else there is nothing for the backend to prune)."""
        return self.dead is not None or self.done_count is not None or self.dead_count is not None

    def dead_cutoff(self, now: float) -> float | None:
        """``dead`` jobs that finished before this are pruned (``inf``, every one, when
        :attr:`dead` is 0); ``None`` when dead jobs are kept whatever their age."""
        if self.dead is None:
            return None
        return now - self.dead if self.dead > 0 else math.inf


@attrs.frozen(kw_only=True)
class SweepResult:
    """What one :meth:`Backend.sweep` did."""

    repended: int = 0
    """Expired leases put back to ``pending``, due at once."""
    expired: Sequence[StoredJob] = ()
    """The jobs counted in ``repended``, when the backend can tell (for audit events)."""
    dead: Sequence[StoredJob] = ()
    """Expired leases whose attempts were exhausted, now ``dead`` (for audit events)."""
    pruned: int = 0
    """``done`` (and ``cancelled``) jobs deleted because their retention passed."""


@attrs.frozen(kw_only=True)
class StoredJobPage:
    """One page of :meth:`Backend.list_jobs`."""

    jobs: Sequence[StoredJob]
    next_cursor: str | None = None
    """Pass it back as ``cursor`` for the next page; ``None`` on the last page."""


@attrs.frozen(kw_only=True)
class WorkerRecord:
    """One running consumer as it registers itself in the backend (the worker registry).

    The core writes it when the consumer starts and again at each heartbeat (every few
    seconds, with fresh ``heartbeat_at`` and counts); the backend stores the latest one per
    ``id`` verbatim.
    """

    id: str
    """Unique per consumer (``"worker-"`` + a ULID)."""
    queue: str
    host: str
    pid: int
    concurrency: int
    started_at: float
    heartbeat_at: float
    in_flight: int = 0
    """Handlers running at the last heartbeat."""
    succeeded: int = 0
    failed: int = 0


@attrs.frozen(kw_only=True)
class QueueStats:
    """What health checks need beyond the counts (:meth:`Backend.queue_stats`)."""

    delayed: int
    """Pending jobs not due yet (``available_at > now``)."""
    oldest_due_at: float | None
    """The earliest ``available_at`` among the pending jobs that are due (how long the
    longest-waiting job has waited), ``None`` when none is due."""


@attrs.frozen(kw_only=True)
class Record:
    """One shared record (:attr:`Capabilities.records`): an optional value and named counters
    under ``(kind, key)``, visible to every process sharing the store until ``expires_at``."""

    kind: str
    key: str
    value: bytes | None
    counters: Mapping[str, float]
    expires_at: float | None


@attrs.frozen(kw_only=True)
class JobCursor:
    """A ready-made :meth:`Backend.list_jobs` cursor for stores that number jobs in enqueue
    order: the position ``(state, seq)`` of the last job of a page.

    ``encode()`` gives the opaque string handed to callers (``"pending:42"``); ``decode()``
    reads it back and raises ``queue/bad-argument`` for anything else.  A backend may use its
    own format instead.
    """

    state: JobState
    seq: int

    def encode(self) -> str:
        """The cursor as callers see it: ``"<state>:<seq>"``."""
        return f"{self.state}:{self.seq}"

    @classmethod
    def decode(cls, text: str) -> JobCursor:
        """Read a cursor made by :meth:`encode`; anything else is ``queue/bad-argument``."""
        state, sep, seq = text.partition(":")
        if sep and state in JOB_STATES and seq.isdigit() and seq.isascii():
            return cls(state=state, seq=int(seq))
        from .errors import BadArgumentError

        raise BadArgumentError(
            "queue/bad-argument",
            f"cursor {text[:40]!r} is not one this backend handed out; pass the next_cursor of "
            f"the previous page, or no cursor for the first page",
        )

    def after(self, state: JobState, seq: int) -> bool:
        """Whether the job at ``(state, seq)`` comes after this position in listing order."""
        rank, mine = JOB_STATES.index(state), JOB_STATES.index(self.state)
        return rank > mine or (rank == mine and seq > self.seq)


T = TypeVar("T")


class JobWatch:
    """What :meth:`Backend.watch_job` yields: one waiter's view of one job's changes.

    The core asks for the job's state with :meth:`Backend.get_job` after opening the watch, and
    again each time :meth:`next_event` returns ``None``, so a backend may wake it spuriously and
    may miss a change: the core falls back to polling at most every second.  This base class
    only sleeps, on the queue's clock (the polling a backend without notifications gets).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def next_event(self, timeout: float) -> str | None:
        """Wait at most ``timeout`` seconds of the queue's clock.

        Return a progress event published for the job (the string given to
        :meth:`Backend.publish_progress`, verbatim, each one once), or ``None`` when the job
        may have changed state (settled) or the time passed.
        """
        await self.clock.sleep(timeout)
        return None

    async def first_of(self, timeout: float, wait: Callable[[], Awaitable[T]]) -> T | None:
        """``await wait()``, or ``None`` once ``timeout`` seconds of the clock passed first:
        a helper for subclasses whose store wakes them, so virtual clocks still drive them."""
        import anyio

        outcome: list[T] = []

        async def run_wait() -> None:
            outcome.append(await wait())
            tg.cancel_scope.cancel()

        async def run_clock() -> None:
            await self.clock.sleep(timeout)
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_wait)
            tg.start_soon(run_clock)
        return outcome[0] if outcome else None


@attrs.frozen(kw_only=True)
class EventRead:
    """What one :meth:`QueueFeed.read` returns."""

    events: Sequence[str] = ()
    """The events appended since the last read, verbatim (the strings given to
    :meth:`~blamequeue.abc.QueueEvents.publish_events`), in the order the store appended
    them."""
    missed: bool = False
    """Some events appended after the watch opened were dropped from the store's log (it is
    capped) before this watch read them: the core tells the watcher with a ``watch.gap``."""


class QueueFeed:
    """What :meth:`~blamequeue.abc.QueueEvents.watch_queue` yields: one watcher's cursor in
    one queue's event log, positioned when the watch opened.  A backend yields a subclass
    whose :meth:`read` reads its store."""

    async def read(self, timeout: float) -> EventRead:
        """The events appended after the cursor, moving the cursor past them; when there are
        none, wait for some at most ``timeout`` seconds of **real** time and return what came
        (maybe nothing: returning early and empty is allowed)."""
        raise NotImplementedError  # pragma: no cover - implemented by each backend


def record_prefix_bound(prefix: str) -> str | None:
    """For backends listing records by key prefix (:meth:`Backend.record_list`): the smallest
    string greater than every string starting with ``prefix`` in code point order, or ``None``
    when there is none to give (an empty prefix, or one ending in the last code point)."""
    if not prefix or ord(prefix[-1]) >= 0x10FFFF:
        return None
    following = ord(prefix[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters: skip past them
        following = 0xE000
    return prefix[:-1] + chr(following)
