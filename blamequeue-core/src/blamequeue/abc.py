"""The backend contract: what a storage plugin implements.

A backend only **stores and transitions** jobs, atomically.  Every policy (argument checks,
backoff, the choice between retry and the dead-letter queue, retries and the circuit breaker,
heartbeats, tick accounting, audit) lives once in the core and reaches the backend as plain
values.  A backend author therefore needs nothing but this module:

* subclass :class:`Backend`, set :attr:`Backend.protocol` and :attr:`Backend.capabilities`;
* register it from a pluggy plugin (entry-point group ``blamequeue``)::

      from blamequeue import hookimpl

      @hookimpl
      def blamequeue_register_protocols(register):
          register("mystore", MyStoreBackend)

* run the conformance suite against it (``from blamequeue_testing.conformance import *`` and a
  ``bq_backend_config`` fixture returning ``{"protocol": "mystore", ...}``).

**Time.** Every time is a float of seconds since the Unix epoch, passed in by the core from the
queue's clock (``now``).  A backend never reads the system clock to decide a transition, so a
virtual clock drives it in tests.

**Payloads.** ``payload``, ``last_error`` and ``meta`` arrive as opaque strings, already
encoded (and sealed) by the core.  Store them verbatim and hand them back verbatim.

**Errors.** A backend raises only :class:`blamequeue.errors.QueueError`.  A temporary failure
(connection lost, database busy, timeout) becomes
:class:`~blamequeue.errors.BackendUnavailableError` (``retryable=True``), chained with
``raise ... from exc``; the core then retries it and counts it towards the circuit breaker.
A permanent failure (bad configuration, unsupported operation) is a non-retryable
``QueueError`` with the matching code.

**Ownership.** A backend opens and closes what it creates; a client or connection it was handed
in its options belongs to the caller and is never closed by the backend.

**Concurrency.** The core may call any method from several tasks at once; a backend serialises
what its store needs serialised.  Several processes may share one store: every transition must
be atomic in the store itself (one SQL statement or transaction, one Lua script, one SQS call),
never a read followed by a write in a second round trip.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import attrs

from ._backend_boundary import ErrorMap, ErrorRule, StoreGuard, redact_chain
from ._backend_kit import (
    SETTLEMENT_OUTCOMES,
    OutcomeRule,
    check_settlements,
    outcome_rule,
    storable_text,
)
from ._backend_options import OptionReader
from ._codec import compact_json
from ._validation import MAX_SECONDS

__all__ = [
    "MAX_SECONDS",
    "Backend",
    "BackendContext",
    "CancelOutcome",
    "Capabilities",
    "Clock",
    "JOB_STATES",
    "JobCursor",
    "JobState",
    "JobWatch",
    "Lease",
    "LeaseLimits",
    "NewJob",
    "QueueStats",
    "Record",
    "Settlement",
    "StoredJob",
    "StoredJobPage",
    "SweepResult",
    "UNIQUE_HOLDING_STATES",
    "WorkerRecord",
    "compact_json",
    "record_prefix_bound",
    # the base kit
    "SETTLEMENT_OUTCOMES",
    "ErrorMap",
    "ErrorRule",
    "OptionReader",
    "OutcomeRule",
    "StoreGuard",
    "check_settlements",
    "outcome_rule",
    "redact_chain",
    "storable_text",
]

JobState = Literal["pending", "inflight", "done", "dead", "parked", "cancelled"]
Outcome = Literal["done", "retry", "dead", "release"]

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
class Capabilities:
    """What a backend can do; the core refuses what it cannot, with a clear error.

    * ``dlq``: keeps a dead-letter queue (``dlq_*`` methods work).
    * ``flows``: can park jobs and release them when their dependencies are done.
    * ``native_lease``: the store enforces leases itself (e.g. SQS visibility timeouts).
    * ``priority`` / ``delay``: honours ``priority`` and ``available_at``.
    * ``cross_process_wakeup``: :meth:`Backend.wait_for_work` returns early when another
      process enqueues.
    * ``requires_seal_key``: payloads leave the process (a shared server), so the queue refuses
      to start without a seal key unless sealing is explicitly off (``seal=False``).
    * ``ephemeral``: the store lives in this process only and dies with it (``memory``); with
      no seal key configured, its jobs are sealed with a key made for this process.  A durable
      store with neither a key nor a :attr:`Backend.store_path` to keep a key file beside is
      refused at construction.
    * ``inspection``: the inspection methods work (:meth:`Backend.get_job`,
      :meth:`Backend.list_jobs`, :meth:`Backend.queue_counts` and the worker registry:
      :meth:`Backend.worker_heartbeat`, :meth:`Backend.worker_gone`,
      :meth:`Backend.list_workers`).  A backend that can answer only some of them leaves it
      false and refuses the others (the defaults of :class:`Backend` do).
    * ``unique``: :meth:`Backend.enqueue_unique` works (unique jobs, ``enqueue(...,
      unique_key=...)``); without it the core refuses a unique key with
      ``queue/unique-unsupported``.
    * ``results``: keeps a ``done`` job's result (:attr:`Settlement.result`) and hands it
      back in :attr:`StoredJob.result` (needs ``inspection``: ``Queue.result`` reads it through
      :meth:`Backend.get_job`).  :meth:`Backend.watch_job` may wake result waiters early.
    * ``progress_events``: :meth:`Backend.publish_progress` reaches the
      :meth:`Backend.watch_job` watches of every process sharing the store (live events, not
      stored); ``Queue.subscribe`` needs it.
    * ``cancel``: :meth:`Backend.cancel` works, and :meth:`Backend.extend` reports the leases
      of cancelled jobs (``None``), so ``Queue.cancel`` can stop a running handler.
    * ``async_libraries``: the event loops it runs on.
    * ``global_rate_limit``: :meth:`Backend.lease_limited` honours ``LeaseLimits.rate_max``
      (a token bucket per queue kept in the store, shared by every process).
    * ``group_limits``: jobs carry ``group_key`` and :meth:`Backend.lease_limited` honours
      ``LeaseLimits.group_concurrency``.  Without it the core refuses ``group_key`` and
      ``group_concurrency`` with ``queue/limits-unsupported``.
    * ``records``: the shared records work (:meth:`Backend.record_put` and its neighbours):
      small keyed values and counters every process sharing the store sees, which batches,
      schedules, metrics and pause flags are built on.  Without it the core refuses those
      features with ``queue/records-unsupported``.
    """

    dlq: bool = True
    flows: bool = False
    native_lease: bool = False
    priority: bool = True
    delay: bool = True
    cross_process_wakeup: bool = False
    requires_seal_key: bool = False
    ephemeral: bool = False
    inspection: bool = False
    unique: bool = False
    results: bool = False
    progress_events: bool = False
    cancel: bool = False
    async_libraries: frozenset[str] = frozenset({"asyncio", "trio"})
    global_rate_limit: bool = False
    group_limits: bool = False
    records: bool = False


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
    group_key: str | None = None
    """The job's group for :attr:`LeaseLimits.group_concurrency` (``Capabilities.group_limits``
    only; the core never sends one to other backends)."""


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
    * ``dead``: to the dead-letter queue, ``finished_at = at``, with ``error``.
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


def _records_unsupported(backend: Backend) -> Exception:
    from .errors import UnsupportedError

    return UnsupportedError(
        "queue/records-unsupported",
        f"backend {backend.context.name!r} (protocol {backend.protocol!r}) keeps no shared "
        f"records, which batches, schedules, metrics and pause flags need; use a backend whose "
        f"capabilities include records (e.g. 'local', 'redis' or 'memory') for them",
    )


def _inspection_unsupported(backend: Backend, what: str) -> Exception:
    from .errors import UnsupportedError

    return UnsupportedError(
        "queue/inspection-unsupported",
        f"backend {backend.context.name!r} (protocol {backend.protocol!r}) cannot {what}; "
        f"inspection needs a backend whose capabilities include inspection (e.g. 'local', "
        f"'memory')",
    )


class Backend(abc.ABC):
    """A job store.  Subclass it; the core drives it.

    Construction takes no I/O: validate ``options`` and raise
    :class:`~blamequeue.errors.ConfigError` (``queue/invalid-config``) for anything wrong,
    naming the option.  ``options`` holds only the backend's own keys; the queue has already
    taken the common ones (``protocol``, ``retry``, ``breaker``, ``backoff``, ``max_attempts``,
    ``retain_done``, ``seal``, ``max_payload_bytes``).
    """

    protocol: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    max_payload_bytes: ClassVar[int | None] = None
    """The most bytes of JSON (before sealing) a payload can take in this store, for a store
    whose messages are limited (SQS): the default of the ``max_payload_bytes`` option and the
    most it may be set to.  ``None`` (the default): the option defaults to 1 MiB and has no
    ceiling.  The core refuses a larger payload with ``queue/payload-too-large`` before the
    backend sees it."""

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        self.options = dict(options)
        self.context = context

    @property
    def store_path(self) -> str | None:
        """A filesystem path the store lives at, if any (used to place a seal key beside it)."""
        return None

    @property
    def overlapped_lease(self) -> bool:
        """True when a lease costs this process little CPU while it waits (the work is done
        by a server, the wait is asynchronous I/O): consumers then lease in halves of their
        concurrency, so the next lease is on its way while the handlers of the last one run.
        False (the default) where the overlap would cost as much as it saves: a store in this
        process (SQLite, memory), or calls made through worker threads."""
        return False

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare the store (create tables, load scripts).  Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired.  Never closes a handle given by the caller."""

    # -- producing -------------------------------------------------------------------------
    @abc.abstractmethod
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        """Store every job, or none of them (one transaction / one script / one batch call).

        Ids are unique; the order of ``jobs`` is their enqueue order (the tie-breaker of
        leasing order).
        """

    async def enqueue_unique(
        self, job: NewJob, *, unique_key: str, hold_until: float | None, now: float
    ) -> str:
        """Store ``job`` unless a job of ``job.queue`` holds ``unique_key``; return the id of
        the job holding the key after the call (``job.id`` when ``job`` was stored).

        Only backends with ``Capabilities.unique``; the default refuses with
        ``queue/unique-unsupported``.  One atomic step in the store (one statement, one
        script), so of any number of concurrent calls with one key, from any process, exactly
        one stores its job and every other returns that job's id.

        A job *holds* its key while its state is one of :data:`UNIQUE_HOLDING_STATES`
        (``pending``, delayed included, or ``inflight``) and its ``hold_until`` (``None``: no
        time limit) is later than the ``now`` of the call asking.  Any other state, or the job
        being deleted (purge, ``done`` without retention), frees the key: check the holder's
        state when asking rather than releasing the key in every transition, so a transition
        added later cannot leak a held key.  :meth:`dlq_retry`
        brings a job back *without* its key.  When the holder is ``job.id`` itself (a call
        retried after its reply was lost), return ``job.id`` and store nothing.
        """
        from .errors import UnsupportedError

        raise UnsupportedError(
            "queue/unique-unsupported",
            f"protocol {self.protocol!r} cannot deduplicate jobs by unique key",
        )

    # -- consuming -------------------------------------------------------------------------
    @abc.abstractmethod
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        """Atomically take up to ``limit`` due jobs of ``queue`` and return them in order.

        Due: ``state == "pending"`` and ``available_at <= now``.  Order: higher ``priority``
        first, then earlier ``available_at``, then enqueue order.  Each taken job becomes
        ``inflight`` with ``attempts + 1``, a fresh token and ``expires_at = now +
        lease_seconds``.  Two concurrent calls (from any process) never return the same job.
        """

    async def lease_limited(
        self, queue: str, *, limit: int, now: float, lease_seconds: float, limits: LeaseLimits
    ) -> list[Lease]:
        """:meth:`lease` under fleet-wide ``limits`` (see :class:`LeaseLimits`), in the same
        single atomic step: refilling and taking rate tokens, counting each group's inflight
        jobs and taking jobs happen together, so concurrent calls from any number of processes
        never exceed a limit together.

        The core calls it instead of :meth:`lease` only for consumers and ticks given limits,
        and only when ``Capabilities.global_rate_limit`` / ``group_limits`` say the backend
        can; the default refuses with ``queue/limits-unsupported``.
        """
        from .errors import UnsupportedError

        raise UnsupportedError(
            "queue/limits-unsupported",
            f"protocol {self.protocol!r} cannot enforce fleet-wide rate or group limits",
        )

    @abc.abstractmethod
    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        """Apply each settlement whose token still owns its ``inflight`` job.

        Returns, per settlement in order, whether it was applied (``False``: stale, the lease
        was lost; nothing changed for that job).  A batch is applied in as few round trips as
        the store allows (group commit); each item is atomic on its own.
        """

    @abc.abstractmethod
    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float
    ) -> Sequence[bool | None]:
        """Move the lease expiry of each ``(job_id, token)`` still owned to ``expires_at``.

        Returns, per pair, whether the lease is still held: ``True`` held, ``False`` lost.
        A backend with ``Capabilities.cancel`` answers ``None`` (also falsy: the lease is not
        held) for a pair whose job is ``cancelled`` and still carries that token, so the
        worker stops the handler (see :meth:`cancel`).
        """

    @abc.abstractmethod
    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        """Recover expired leases and prune retained ``done`` jobs, on every queue.

        An ``inflight`` job whose lease expired (``expires_at <= now``) goes back to
        ``pending`` due at ``now`` when ``attempts < max_attempts``, else to ``dead`` with
        ``last_error = expired_error`` and ``finished_at = now``.  ``done`` jobs finished
        before ``now - retain_done`` are deleted, and so are ``cancelled`` ones.
        """

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Return when work may have arrived from another process, or after ``timeout``.

        The default waits ``timeout`` seconds of real time.  A backend that can hear other
        processes (a blocking pop, a notification) returns earlier and sets
        ``Capabilities.cross_process_wakeup``.  Same-process enqueues wake consumers in the
        core; a backend need not handle them.
        """
        import anyio

        await anyio.sleep(timeout)

    async def wait_and_lease(
        self, queue: str, *, timeout: float, limit: int, now: float, lease_seconds: float
    ) -> list[Lease] | None:
        """:meth:`wait_for_work`, then, when work came, :meth:`lease` in the same exchange with
        the store, as it would have leased at the moment the wait ended: an idle consumer on a
        server backend gets its jobs without a round trip of its own.  ``now`` is the caller's
        clock when it starts waiting; the lease happens at that clock moved on by the time the
        wait took (a backend may read its context's clock again as it sends the wait).

        ``None``: the backend only waited (the default: :meth:`wait_for_work`); the caller
        leases itself.  A list (maybe empty): what was leased.  When the caller is cancelled,
        nothing stays leased to it: the backend gives back what the wait may have taken.
        """
        await self.wait_for_work(queue, timeout=timeout)
        return None

    # -- results and progress (only with Capabilities.results / progress_events) -------------
    @contextlib.asynccontextmanager
    async def watch_job(self, job_id: str) -> AsyncIterator[JobWatch]:
        """Watch one job for ``Queue.result`` and ``Queue.subscribe``: subscribe to whatever
        the store can tell about ``job_id`` (its settlement, its progress events) *before*
        yielding, so nothing that happens after the core's next :meth:`get_job` is missed.

        The default yields a plain :class:`JobWatch` (polling on the clock).  A backend that
        can hear settlements (a notification published atomically with them) or progress
        events yields its own subclass.  The watch ends when the context exits.
        """
        yield JobWatch(self.context.clock)

    async def publish_progress(self, job_id: str, event: str, *, now: float) -> None:  # noqa: B027
        """Deliver ``event`` (opaque text from the core) to every open :meth:`watch_job` of
        ``job_id``, in any process, at most once each; never stored beyond a few seconds.
        Best effort: a watch opened later does not see it.  Backends without
        ``Capabilities.progress_events`` keep this default, which does nothing."""

    # -- inspecting and operating ---------------------------------------------------------
    @abc.abstractmethod
    async def size(self, queue: str) -> int:
        """Jobs of ``queue`` in ``pending``, ``inflight`` or ``parked`` (delayed included)."""

    @abc.abstractmethod
    async def purge(self, queue: str) -> int:
        """Delete every live job of ``queue`` and its ``done`` (and ``cancelled``) rows; leave
        ``dead`` ones.

        Returns how many live (pending, inflight, parked) jobs were deleted.
        """

    @abc.abstractmethod
    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        """The ``dead`` jobs of ``queue``, most recently failed first, at most ``limit``."""

    @abc.abstractmethod
    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        """Move one ``dead`` job back to ``pending`` due at ``now`` with ``attempts = 0``.

        A job enqueued with a unique key comes back without it (with ``Capabilities.unique``:
        it holds no key, and an enqueue with that key stores a new job).

        Returns the job as it was before the move, or ``None`` when no dead job has that id.
        """

    @abc.abstractmethod
    async def dlq_size(self, queue: str) -> int:
        """How many ``dead`` jobs ``queue`` has."""

    @abc.abstractmethod
    async def dlq_purge(self, queue: str) -> int:
        """Delete the ``dead`` jobs of ``queue``; return how many."""

    # -- cancel (only with Capabilities.cancel) ---------------------------------------------
    async def cancel(self, job_id: str, *, now: float) -> CancelOutcome | None:
        """Atomically move the job ``job_id`` to ``cancelled`` if it is ``pending`` (delayed
        too), ``inflight`` or ``parked``, with ``finished_at = now``; ``None`` when the store
        holds no such job.

        One atomic step (one statement, one script), whatever state the job is in:

        * the job leaves every index a lease, the sweep or ``size`` reads: it is never leased
          again, and a ``cancelled`` job counts in none of ``size``, the sweep's recovery or
          the DLQ;
        * an ``inflight`` job keeps its lease token, so settling with that token is refused
          (the lease no longer owns an ``inflight`` job: counted stale) and :meth:`extend`
          with it answers ``None``, which tells the worker to cancel the handler;
        * a ``cancelled`` job is kept like a ``done`` one: pruned by the sweep after
          ``retain_done``, deleted by :meth:`purge`;
        * flows: jobs ``parked`` behind a cancelled job are left parked, as behind a ``dead``
          one (only ``done`` releases them).

        A job already ``done``, ``dead`` or ``cancelled`` is left as it is
        (``CancelOutcome.cancelled`` is False).  Backends without ``Capabilities.cancel`` keep
        this default, which refuses.
        """
        from .errors import UnsupportedError

        raise UnsupportedError(
            "queue/cancel-unsupported",
            f"backend {self.context.name!r} (protocol {self.protocol!r}) cannot cancel jobs by "
            f"id; cancel on a backend whose capabilities include cancel (e.g. 'local', "
            f"'memory', 'redis')",
        )

    # -- flows (only with Capabilities.flows) ------------------------------------------------
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        """Every job still stored with this ``flow_id``, in enqueue order.

        Backends without ``Capabilities.flows`` keep this default, which refuses.
        """
        from .errors import UnsupportedError

        raise UnsupportedError(
            "queue/flow-unsupported",
            f"protocol {self.protocol!r} cannot park and release flow children",
        )

    # -- shared records (only with Capabilities.records) -------------------------------------
    # Small keyed state the jobs layer keeps in the store so every process sees it: batches,
    # schedules and their once-per-slot claims, metrics windows, pause flags.  ``kind`` and
    # ``key`` are non-empty strings without NUL; a record whose ``expires_at`` has passed
    # (``<= now``) is gone for every method, and :meth:`sweep` may delete it.  Each method is
    # atomic on its own.  Backends without the capability keep these defaults, which refuse.
    async def record_put(
        self,
        kind: str,
        key: str,
        value: bytes,
        *,
        now: float,
        expires_at: float | None = None,
        if_absent: bool = False,
    ) -> bool:
        """Set the value of ``(kind, key)`` and its expiry, keeping its counters; with
        ``if_absent`` only when no live record exists (a claim).  Returns whether it wrote."""
        raise _records_unsupported(self)

    async def record_get(self, kind: str, key: str, *, now: float) -> Record | None:
        """The live record ``(kind, key)``, or ``None``."""
        raise _records_unsupported(self)

    async def record_get_many(
        self, kind: str, keys: Sequence[str], *, now: float
    ) -> list[Record | None]:
        """:meth:`record_get` for each key, in one read."""
        raise _records_unsupported(self)

    async def record_list(
        self, kind: str, *, now: float, prefix: str = "", limit: int | None = None
    ) -> list[Record]:
        """The live records of ``kind`` whose key starts with ``prefix``, ordered by key (code
        point order), at most ``limit`` of them."""
        raise _records_unsupported(self)

    async def record_add(
        self,
        kind: str,
        key: str,
        deltas: Mapping[str, float],
        *,
        now: float,
        expires_at: float | None = None,
        once: str | None = None,
    ) -> tuple[Record, bool]:
        """Add ``deltas`` to the named counters of ``(kind, key)`` (absent counters and records
        start at 0; a record that expired starts afresh) and, when given, set its expiry.

        ``once`` is an idempotency token: when the record already applied it, nothing changes.
        Returns the record after the call and whether the deltas were applied.
        """
        raise _records_unsupported(self)

    async def record_delete(self, kind: str, key: str) -> bool:
        """Delete ``(kind, key)`` with its counters and tokens; returns whether one was stored."""
        raise _records_unsupported(self)

    # -- inspection (only with Capabilities.inspection) ---------------------------------------
    # Reads for operators, the CLI and dashboards, and the worker registry each consumer writes
    # every few seconds: never on the lease/settle path.  Each read is consistent on its own;
    # two reads (two pages) may see the store between transitions.  Backends without the
    # capability keep these defaults, which refuse with an UnsupportedError saying so (the
    # core then stops writing the registry).
    async def get_job(self, job_id: str) -> StoredJob | None:
        """The job with ``job_id`` in any state, or ``None`` when the store holds none (never
        enqueued, purged, or a ``done`` job pruned after its retention)."""
        raise _inspection_unsupported(self, "look up jobs by id")

    async def list_jobs(
        self, queue: str, *, state: JobState | None, limit: int, cursor: str | None
    ) -> StoredJobPage:
        """One page of the jobs of ``queue``, at most ``limit`` (>= 1) of them.

        Order: by state in :data:`JOB_STATES` order, then enqueue order; ``state`` keeps
        only the jobs in that state.  ``cursor`` is ``None`` for the first page, else the
        ``next_cursor`` of the page before: the page starts right after the job that cursor
        names, in that order (keyset paging: no job is skipped or repeated unless it changes
        state between pages; the cost of a page does not grow with how far in it is).
        ``next_cursor`` is ``None`` when no job follows.  The cursor is the backend's own
        opaque string; one it cannot read raises ``queue/bad-argument``.
        """
        raise _inspection_unsupported(self, "list jobs")

    async def queue_counts(self) -> dict[str, dict[JobState, int]]:
        """How many jobs each queue holds in each state: ``{queue: {state: count}}``.

        Every queue holding at least one job appears, with every state of
        :data:`JOB_STATES` as a key.
        """
        raise _inspection_unsupported(self, "count jobs per queue and state")

    async def queue_stats(self, queue: str, *, now: float) -> QueueStats:
        """How many of ``queue``'s pending jobs are delayed, and since when the
        longest-waiting due job has been due (health checks; part of ``inspection``)."""
        raise _inspection_unsupported(self, "report delayed jobs and queue latency")

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        """Store ``worker`` under ``worker.id``, replacing the record stored before (the first
        call registers the worker)."""
        raise _inspection_unsupported(self, "keep a worker registry")

    async def worker_gone(self, worker_id: str) -> None:
        """Delete the record of ``worker_id`` (a consumer stopped).  Unknown ids are ignored."""
        raise _inspection_unsupported(self, "keep a worker registry")

    async def list_workers(self, *, alive_since: float) -> list[WorkerRecord]:
        """The records whose ``heartbeat_at >= alive_since``, ordered by ``(queue,
        started_at, id)``.

        Older records belong to workers that died without deregistering; the backend may
        delete them now.
        """
        raise _inspection_unsupported(self, "keep a worker registry")
