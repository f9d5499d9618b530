"""The backend contract: what a storage plugin implements.

A backend only **stores and transitions** jobs, atomically.  Every policy (argument checks,
backoff, the choice between retry and the dead-letter queue, retries and the circuit breaker,
heartbeats, tick accounting, audit) lives once in the core and reaches the backend as plain
values.  A backend author therefore needs nothing but this module:

* subclass :class:`Backend` (the required part: store, lease, settle, sweep, size, purge) and
  set :attr:`Backend.protocol`; then inherit the optional facets your store can hold
  (:class:`DeadLetters`, :class:`Flows`, :class:`Records`, :class:`Inspection`, ...): each
  adds its methods, and :attr:`Backend.capabilities` follows from the facets inherited;
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
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, Self

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
from ._backend_values import (
    DEPENDENCY_POLICIES,
    JOB_STATES,
    UNIQUE_HOLDING_STATES,
    BackendContext,
    CancelOutcome,
    Clock,
    DependencyPolicy,
    EditOutcome,
    EventRead,
    JobCursor,
    JobState,
    JobWatch,
    Lease,
    LeaseLimits,
    NewJob,
    QueueFeed,
    QueueStats,
    Record,
    Retention,
    Settlement,
    StoredJob,
    StoredJobPage,
    SweepResult,
    WorkerRecord,
    record_prefix_bound,
)
from ._codec import compact_json
from ._validation import MAX_SECONDS
from .errors import ErrorCode, UnsupportedError

__all__ = [
    "MAX_SECONDS",
    "FACETS",
    "Backend",
    "BackendContext",
    "CancelOutcome",
    "Cancellation",
    "Capabilities",
    "Clock",
    "CrossQueueFlows",
    "DEPENDENCY_POLICIES",
    "DeadLetters",
    "EditOutcome",
    "EventRead",
    "DependencyPolicy",
    "FlowPolicies",
    "Flows",
    "GroupLimits",
    "Inspection",
    "JobEdits",
    "JobEvents",
    "JobIds",
    "Lifo",
    "NextDue",
    "OverlappedLease",
    "QueueEvents",
    "QueueFeed",
    "RateLimits",
    "Records",
    "Results",
    "RetentionLimits",
    "Uniqueness",
    "WaitAndLease",
    "Wakeup",
    "JOB_STATES",
    "JobCursor",
    "JobState",
    "JobWatch",
    "Lease",
    "LimitedLease",
    "LeaseLimits",
    "NewJob",
    "QueueStats",
    "Record",
    "Retention",
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

Refusal = tuple[ErrorCode, str, str]
"""A facet's refusal: the error code, what a backend without it cannot do, and the shipped
backends that have it (or another way out)."""


@attrs.frozen(kw_only=True)
class Capabilities:
    """What a backend can do, **derived** from the facets its class inherits and its traits
    (:meth:`of`); never set by hand.  The core refuses what a backend cannot do, with a clear
    error, and the conformance suite runs a facet's tests only for backends that have it.

    From the facets (each one names the facet that gives it):

    * ``dlq``: :class:`DeadLetters`.
    * ``flows``: :class:`Flows`.
    * ``flow_policies``: :class:`FlowPolicies`.
    * ``cross_queue_flows``: :class:`CrossQueueFlows`.
    * ``records``: :class:`Records`.
    * ``unique``: :class:`Uniqueness`.
    * ``global_rate_limit``: :class:`RateLimits`.
    * ``group_limits``: :class:`GroupLimits`.
    * ``inspection``: :class:`Inspection`.
    * ``results``: :class:`Results`.
    * ``progress_events``: :class:`JobEvents`.
    * ``cancel``: :class:`Cancellation`.
    * ``queue_events``: :class:`QueueEvents`.
    * ``retention_limits``: :class:`RetentionLimits`.
    * ``job_edits``: :class:`JobEdits`.
    * ``job_ids``: :class:`JobIds`.
    * ``lifo``: :class:`Lifo`.
    * ``cross_process_wakeup``: :class:`Wakeup`.
    * ``next_due``: :class:`NextDue`.
    * ``wait_and_lease``: :class:`WaitAndLease` (speed only).
    * ``overlapped_lease``: :class:`OverlappedLease` (speed only).

    From the traits of the store (class attributes of :class:`Backend`, documented there):
    ``priority``, ``delay``, ``requires_seal_key``, ``ephemeral``, ``store_clock``,
    ``keeps_done`` and ``async_libraries``.
    """

    dlq: bool = False
    flows: bool = False
    flow_policies: bool = False
    cross_queue_flows: bool = False
    records: bool = False
    unique: bool = False
    global_rate_limit: bool = False
    group_limits: bool = False
    inspection: bool = False
    results: bool = False
    progress_events: bool = False
    cancel: bool = False
    queue_events: bool = False
    retention_limits: bool = False
    job_edits: bool = False
    job_ids: bool = False
    lifo: bool = False
    cross_process_wakeup: bool = False
    next_due: bool = False
    wait_and_lease: bool = False
    overlapped_lease: bool = False
    priority: bool = True
    delay: bool = True
    requires_seal_key: bool = False
    ephemeral: bool = False
    store_clock: bool = False
    keeps_done: bool = True
    async_libraries: frozenset[str] = frozenset({"asyncio", "trio"})

    @classmethod
    def of(cls, backend: type[Backend]) -> Capabilities:
        """The capabilities of the backend class ``backend``: one per facet it inherits, and
        its traits."""
        facets = {str(facet.capability): issubclass(backend, facet) for facet in FACETS}
        return cls(
            **facets,
            priority=backend.priority,
            delay=backend.delay,
            requires_seal_key=backend.requires_seal_key,
            ephemeral=backend.ephemeral,
            store_clock=backend.store_clock,
            keeps_done=backend.keeps_done,
            async_libraries=frozenset(backend.async_libraries),
        )


class Backend(abc.ABC):
    """The required part of every backend: a job store the core drives.  Subclass it, set
    :attr:`protocol`, implement the abstract methods below, and the queue works: enqueue,
    lease, settle (complete, retry, dead-letter, release), extend, sweep, size and purge.  Then
    inherit the optional facets (:class:`DeadLetters`, :class:`Flows`, :class:`FlowPolicies`,
    :class:`CrossQueueFlows`, :class:`Records`, :class:`Uniqueness`, :class:`RateLimits`,
    :class:`GroupLimits`, :class:`Inspection`, :class:`Results`, :class:`JobEvents`,
    :class:`Cancellation`, :class:`QueueEvents`, :class:`RetentionLimits`, :class:`JobEdits`,
    :class:`JobIds`,
    :class:`Lifo`, :class:`Wakeup`, :class:`NextDue`, :class:`WaitAndLease`,
    :class:`OverlappedLease`) your store can hold:
    each adds its methods, and :attr:`capabilities` follows from the facets a class inherits.

    Construction takes no I/O: validate ``options`` and raise
    :class:`~blamequeue.errors.ConfigError` (``queue/invalid-config``) for anything wrong,
    naming the option.  ``options`` holds only the backend's own keys; the queue has already
    taken the common ones (``protocol``, ``retry``, ``breaker``, ``backoff``, ``max_attempts``,
    ``retain_done``, ``retain_dead``, ``retain_done_count``, ``retain_dead_count``, ``seal``,
    ``max_payload_bytes``).
    """

    protocol: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    """Derived from the facets the class inherits and its traits (:meth:`Capabilities.of`);
    set for each subclass when it is defined.  Setting it by hand is refused."""
    capability: ClassVar[str | None] = None
    """On a facet: the field of :class:`Capabilities` it gives."""
    refusal: ClassVar[Refusal | None] = None
    """On a facet the core may need: the error code, what a backend without it cannot do, and
    the shipped backends that have it (:meth:`of` words the refusal)."""

    # -- traits of the store (class attributes; the defaults fit most stores) ---------------
    async_libraries: ClassVar[frozenset[str]] = frozenset({"asyncio", "trio"})
    """The event loops the backend runs on."""
    priority: ClassVar[bool] = True
    """:meth:`lease` honours :attr:`NewJob.priority`.  False: the core refuses a priority
    other than 0 with ``queue/bad-argument`` (SQS)."""
    delay: ClassVar[bool] = True
    """:meth:`lease` honours :attr:`NewJob.available_at` (delays and retry backoff)."""
    requires_seal_key: ClassVar[bool] = False
    """Payloads leave the process (a shared server), so the queue refuses to start without a
    seal key unless sealing is explicitly off (``seal=False``)."""
    ephemeral: ClassVar[bool] = False
    """The store lives in this process only and dies with it (``memory``); with no seal key
    configured, its jobs are sealed with a key made for this process.  A durable store with
    neither a key nor a :attr:`store_path` to keep a key file beside is refused."""
    store_clock: ClassVar[bool] = False
    """The store keeps lease expiry and delays on its own clock (SQS visibility timeouts and
    delay timers), not on the ``now`` the core passes: a virtual clock cannot move them."""
    keeps_done: ClassVar[bool] = True
    """A ``done`` (or ``cancelled``) job stays stored until the sweep prunes it after
    ``retain_done``.  False for a message queue that deletes a job's message when it
    completes (SQS)."""
    max_payload_bytes: ClassVar[int | None] = None
    """The most bytes of JSON (before sealing) a payload can take in this store, for a store
    whose messages are limited (SQS): the default of the ``max_payload_bytes`` option and the
    most it may be set to.  ``None`` (the default): the option defaults to 1 MiB and has no
    ceiling.  The core refuses a larger payload with ``queue/payload-too-large`` before the
    backend sees it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            return  # the facets themselves: FACETS is not complete yet
        if "capabilities" in cls.__dict__:
            raise TypeError(
                f"{cls.__qualname__} sets capabilities by hand; they are derived from the facets "
                f"a backend inherits (blamequeue.abc.DeadLetters, Flows, Records, ...) and its "
                f"traits (priority, delay, requires_seal_key, ...): inherit the facets instead"
            )
        cls.capabilities = Capabilities.of(cls)

    @classmethod
    def of(cls, backend: Backend) -> Self:
        """``backend`` as this facet (``DeadLetters.of(backend)``), or, when it lacks the
        facet, the facet's clear :class:`~blamequeue.errors.UnsupportedError`
        (``queue/dlq-unsupported``, ``queue/flow-unsupported``, ...)."""
        if isinstance(backend, cls):
            return backend
        if cls.refusal is None:
            raise TypeError(f"{cls.__name__} is a speed-only facet: test isinstance() instead")
        code, what, where = cls.refusal
        raise UnsupportedError(
            code,
            f"backend {backend.context.name!r} (protocol {backend.protocol!r}) cannot {what}; "
            f"use a backend whose capabilities include {cls.capability} (it has the "
            f"{cls.__name__} facet, {where})",
        )

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        self.options = dict(options)
        self.context = context

    @property
    def store_path(self) -> str | None:
        """A filesystem path the store lives at, if any (used to place a seal key beside it)."""
        return None

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare the store (create tables, load scripts).  Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired.  Never closes a handle given by the caller."""

    # -- producing and consuming -----------------------------------------------------------
    @abc.abstractmethod
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        """Store every job, or none of them (one transaction / one script / one batch call).

        Ids are unique; the order of ``jobs`` is their enqueue order (the tie-breaker of
        leasing order).  The core makes the ids (``"job-"`` + a ULID, or the id a scheduler
        chose and retries with), so an id already stored is a retry of a call whose reply was
        lost (acknowledge it when the stored job is the one sent) or a mistake: refuse it with
        ``queue/bad-argument``, storing nothing.  Ids a caller chose go to
        :meth:`JobIds.enqueue_absent` instead.
        """

    @abc.abstractmethod
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        """Atomically take up to ``limit`` due jobs of ``queue`` and return them in order.

        Due: ``state == "pending"`` and ``available_at <= now``.  Order: higher ``priority``
        first, then earlier ``available_at``, then enqueue order (with :class:`Lifo`, the jobs
        enqueued with :attr:`NewJob.lifo` go first within their priority: see there).  Each
        taken job becomes ``inflight`` with ``attempts + 1``, a fresh token and ``expires_at =
        now + lease_seconds``.  Two concurrent calls (from any process) never return the same job.
        """

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

    @abc.abstractmethod
    async def size(self, queue: str) -> int:
        """Jobs of ``queue`` in ``pending``, ``inflight`` or ``parked`` (delayed included)."""

    @abc.abstractmethod
    async def purge(self, queue: str) -> int:
        """Delete every live job of ``queue`` and its ``done`` (and ``cancelled``) rows; leave
        ``dead`` ones.

        Returns how many live (pending, inflight, parked) jobs were deleted.
        """

    # -- waiting and watching (defaults that fit any store; facets do better) -------------
    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Return when work may have arrived from another process, or after ``timeout``.

        The default waits ``timeout`` seconds of real time.  A backend that can hear other
        processes (a blocking pop, a notification) returns earlier and inherits
        :class:`Wakeup`.  Same-process enqueues wake consumers in the
        core; a backend need not handle them.
        """
        import anyio

        await anyio.sleep(timeout)

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


class DeadLetters(Backend):
    """Facet: a dead-letter queue the core can read and operate (``Queue.dlq_*``).

    Every backend moves a job to ``dead`` (:meth:`Backend.settle` with outcome ``dead``, the
    sweep after the last attempt); this facet lists, retries and purges them.
    """

    capability = "dlq"
    refusal: ClassVar[Refusal | None] = (
        "queue/dlq-unsupported",
        "read or operate a dead-letter queue",
        "e.g. 'local', 'redis', 'sqs', 'memory'",
    )

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


class Flows(Backend):
    """Facet: flows.  :meth:`Backend.enqueue` stores a job with :attr:`NewJob.parked` as
    ``parked``; settling a job ``done`` releases (to ``pending``, due at ``now``) each parked
    job of its flow whose every dependency is then ``done``, in the same atomic step; a job
    whose dependencies are no longer stored counts them as done.

    A job that ends ``dead`` (or ``cancelled``) releases nothing: the jobs parked behind it
    stay parked, and are released when it is retried (:meth:`DeadLetters.dlq_retry`) and
    completes.  :class:`FlowPolicies` lets each of them choose otherwise.
    """

    capability = "flows"
    refusal: ClassVar[Refusal | None] = (
        "queue/flow-unsupported",
        "park flow children and release them when their dependencies are done",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        """Every job still stored with this ``flow_id``, in enqueue order."""


class FlowPolicies(Flows):
    """Facet: a parked flow job's :attr:`NewJob.on_dependency_failure` (store it with the job,
    and :attr:`NewJob.dependants_error` too).  No methods of its own: it changes what the
    transitions of :class:`Backend` and :class:`Cancellation` do to the jobs parked behind a
    job that ends ``dead`` or ``cancelled``.

    Every step that makes a flow job ``dead`` or ``cancelled`` (:meth:`Backend.settle` with
    outcome ``dead``, :meth:`Backend.sweep` dead-lettering an expired lease,
    :meth:`Cancellation.cancel`, and this rule itself), applies, **in the same atomic step**,
    to each ``parked`` job whose ``depends_on`` names it, according to that job's policy:

    * ``"wait"``: nothing; it stays parked (released should the dead job be retried and
      complete);
    * ``"fail"``: it becomes ``dead``, ``finished_at`` the dying job's, ``last_error`` the
      dying job's ``dependants_error``, attempts unchanged; and the rule applies to the jobs
      parked behind *it*, so a failure travels down the graph as far as the jobs that say
      ``"fail"``, and stops at the first that waits (or ignores);
    * ``"ignore"``: the dead (or cancelled) dependency counts as done for it: released to
      ``pending``, due at the dying job's ``finished_at``, when every other dependency is
      done, gone, or dead or cancelled too.

    The release on ``done`` (:class:`Flows`) counts, for an ``"ignore"`` job, its ``dead``
    and ``cancelled`` dependencies as done as well.  Retrying a dead job changes nothing for
    the jobs parked behind it.  The core refuses a policy other than ``"wait"`` on a backend
    without this facet (``queue/flow-unsupported``) and never sends one.
    """

    capability = "flow_policies"
    refusal: ClassVar[Refusal | None] = (
        "queue/flow-unsupported",
        "let flow children fail or go on when a dependency dies (on_dependency_failure)",
        "e.g. 'local', 'redis', 'memory'",
    )


class CrossQueueFlows(Flows):
    """Facet: one flow's jobs on several queues of the backend (``FlowChild.queue_name``).
    No methods of its own.

    The release of parked jobs (:class:`Flows`) and, with :class:`FlowPolicies`, the
    dependency policies reach the flow's jobs on every queue, in the same atomic step as the
    transition that causes them; a released job is leased by the consumers of its own queue,
    and a backend with :class:`Wakeup` wakes that queue's idle consumers in other processes
    (this process's are woken by the core).  :meth:`Flows.flow_jobs` answers the flow's jobs
    of every queue.  The core refuses a child on another queue on a backend without this
    facet (``queue/flow-unsupported``).
    """

    capability = "cross_queue_flows"
    refusal: ClassVar[Refusal | None] = (
        "queue/flow-unsupported",
        "put the children of one flow on other queues",
        "e.g. 'local', 'memory'",
    )


class Records(Backend):
    """Facet: shared records.  Small keyed state the jobs layer keeps in the store so every
    process sees it: batches, schedules and their once-per-slot claims, metrics windows, pause
    flags.  ``kind`` and ``key`` are non-empty strings without NUL; a record whose
    ``expires_at`` has passed (``<= now``) is gone for every method, and :meth:`Backend.sweep`
    may delete it.  Each method is atomic on its own.
    """

    capability = "records"
    refusal: ClassVar[Refusal | None] = (
        "queue/records-unsupported",
        "keep the shared records that batches, schedules, metrics and pause flags need",
        "e.g. 'local', 'redis' or 'memory'",
    )

    @abc.abstractmethod
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

    @abc.abstractmethod
    async def record_get(self, kind: str, key: str, *, now: float) -> Record | None:
        """The live record ``(kind, key)``, or ``None``."""

    @abc.abstractmethod
    async def record_get_many(
        self, kind: str, keys: Sequence[str], *, now: float
    ) -> list[Record | None]:
        """:meth:`record_get` for each key, in one read."""

    @abc.abstractmethod
    async def record_list(
        self, kind: str, *, now: float, prefix: str = "", limit: int | None = None
    ) -> list[Record]:
        """The live records of ``kind`` whose key starts with ``prefix``, ordered by key (code
        point order), at most ``limit`` of them."""

    @abc.abstractmethod
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

    @abc.abstractmethod
    async def record_delete(self, kind: str, key: str) -> bool:
        """Delete ``(kind, key)`` with its counters and tokens; returns whether one was stored."""


class Uniqueness(Backend):
    """Facet: unique jobs (``enqueue(..., unique_key=...)``)."""

    capability = "unique"
    refusal: ClassVar[Refusal | None] = (
        "queue/unique-unsupported",
        "deduplicate jobs by unique key",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    async def enqueue_unique(
        self, job: NewJob, *, unique_key: str, hold_until: float | None, now: float
    ) -> str:
        """Store ``job`` unless a job of ``job.queue`` holds ``unique_key``; return the id of
        the job holding the key after the call (``job.id`` when ``job`` was stored).

        One atomic step in the store (one statement, one
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


class LimitedLease(Backend):
    """The method the facets :class:`RateLimits` and :class:`GroupLimits` share: a backend
    with either, or both, implements :meth:`lease_limited` once.  Not a facet of its own
    (it gives no capability): inherit one of the two."""

    @abc.abstractmethod
    async def lease_limited(
        self, queue: str, *, limit: int, now: float, lease_seconds: float, limits: LeaseLimits
    ) -> list[Lease]:
        """:meth:`lease` under fleet-wide ``limits`` (see :class:`LeaseLimits`), in the same
        single atomic step: refilling and taking rate tokens, counting each group's inflight
        jobs and taking jobs happen together, so concurrent calls from any number of processes
        never exceed a limit together.

        The core calls it instead of :meth:`lease` only for consumers and ticks given limits,
        and only for the limits whose facet the backend has (:class:`RateLimits`,
        :class:`GroupLimits`).
        """


class RateLimits(LimitedLease):
    """Facet: fleet-wide rate limits.  :meth:`LimitedLease.lease_limited` honours
    :attr:`LeaseLimits.rate_max` (a token bucket per queue kept in the store, shared by every
    process)."""

    capability = "global_rate_limit"
    refusal: ClassVar[Refusal | None] = (
        "queue/limits-unsupported",
        "enforce a fleet-wide rate limit",
        "e.g. 'local', 'redis', 'memory'",
    )


class GroupLimits(LimitedLease):
    """Facet: group limits.  Jobs carry :attr:`NewJob.group_key` and
    :meth:`LimitedLease.lease_limited` honours :attr:`LeaseLimits.group_concurrency`.
    Without it the core refuses ``group_key`` and ``group_concurrency`` with
    ``queue/limits-unsupported``."""

    capability = "group_limits"
    refusal: ClassVar[Refusal | None] = (
        "queue/limits-unsupported",
        "enforce group concurrency limits",
        "e.g. 'local', 'redis', 'memory'",
    )


class Inspection(Backend):
    """Facet: reads for operators, the CLI and dashboards, and the worker registry each
    consumer writes every few seconds: never on the lease/settle path.  Each read is
    consistent on its own; two reads (two pages) may see the store between transitions.
    Without it the core stops writing the registry.
    """

    capability = "inspection"
    refusal: ClassVar[Refusal | None] = (
        "queue/inspection-unsupported",
        "look up, list or count jobs, or keep a worker registry",
        "e.g. 'local', 'memory'",
    )

    @abc.abstractmethod
    async def get_job(self, job_id: str) -> StoredJob | None:
        """The job with ``job_id`` in any state, or ``None`` when the store holds none (never
        enqueued, purged, or a ``done`` job pruned after its retention)."""

    @abc.abstractmethod
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

    @abc.abstractmethod
    async def queue_counts(self) -> dict[str, dict[JobState, int]]:
        """How many jobs each queue holds in each state: ``{queue: {state: count}}``.

        Every queue holding at least one job appears, with every state of
        :data:`JOB_STATES` as a key.
        """

    @abc.abstractmethod
    async def queue_stats(self, queue: str, *, now: float) -> QueueStats:
        """How many of ``queue``'s pending jobs are delayed, and since when the
        longest-waiting due job has been due (health checks; part of ``inspection``)."""

    @abc.abstractmethod
    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        """Store ``worker`` under ``worker.id``, replacing the record stored before (the first
        call registers the worker)."""

    @abc.abstractmethod
    async def worker_gone(self, worker_id: str) -> None:
        """Delete the record of ``worker_id`` (a consumer stopped).  Unknown ids are ignored."""

    @abc.abstractmethod
    async def list_workers(self, *, alive_since: float) -> list[WorkerRecord]:
        """The records whose ``heartbeat_at >= alive_since``, ordered by ``(queue,
        started_at, id)``.

        Older records belong to workers that died without deregistering; the backend may
        delete them now.
        """


class Results(Inspection):
    """Facet: results.  Keeps a ``done`` job's result (:attr:`Settlement.result`) and hands
    it back in :attr:`StoredJob.result`; ``Queue.result`` reads it through
    :meth:`Inspection.get_job`, so this facet needs :class:`Inspection` too.
    :meth:`Backend.watch_job` may wake result waiters early.  No methods of its own.
    """

    capability = "results"
    refusal: ClassVar[Refusal | None] = (
        "queue/results-unsupported",
        "keep job results",
        "e.g. 'local', 'redis', 'memory'",
    )


class JobEvents(Backend):
    """Facet: live job events.  :meth:`publish_progress` reaches the :meth:`watch_job`
    watches of every process sharing the store (live events, not stored);
    ``Queue.subscribe`` needs it.
    """

    capability = "progress_events"
    refusal: ClassVar[Refusal | None] = (
        "queue/results-unsupported",
        "deliver live job events",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    @contextlib.asynccontextmanager
    async def watch_job(self, job_id: str) -> AsyncIterator[JobWatch]:
        """Watch one job for ``Queue.result`` and ``Queue.subscribe``: subscribe to whatever
        the store can tell about ``job_id`` (its settlement, its progress events) *before*
        yielding, so nothing that happens after the core's next :meth:`get_job` is missed.

        Yield a subclass of :class:`JobWatch` whose ``next_event`` returns the events
        :meth:`publish_progress` delivers (and may wake on settlements).  The watch ends
        when the context exits.
        """
        yield JobWatch(self.context.clock)  # pragma: no cover - abstract

    @abc.abstractmethod
    async def publish_progress(self, job_id: str, event: str, *, now: float) -> None:
        """Deliver ``event`` (opaque text from the core) to every open :meth:`watch_job` of
        ``job_id``, in any process, at most once each; never stored beyond a few seconds.
        Best effort: a watch opened later does not see it."""


class Cancellation(Backend):
    """Facet: cancelling jobs by id (``Queue.cancel``), running ones included."""

    capability = "cancel"
    refusal: ClassVar[Refusal | None] = (
        "queue/cancel-unsupported",
        "cancel jobs by id",
        "e.g. 'local', 'memory', 'redis'",
    )

    @abc.abstractmethod
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
        * flows: jobs ``parked`` behind a cancelled job are treated as behind a ``dead`` one:
          left parked, or, with :class:`FlowPolicies`, each following its
          :attr:`NewJob.on_dependency_failure` in the same atomic step (a cancelled job will
          never be done either).

        A job already ``done``, ``dead`` or ``cancelled`` is left as it is
        (``CancelOutcome.cancelled`` is False).
        """


class QueueEvents(Backend):
    """Facet: a queue's events across processes (``Queue.watch``).  Each queue has an event
    log in the store: the core appends the events of its processes with
    :meth:`publish_events` while someone watches the queue (:meth:`mark_watched`,
    :meth:`is_watched`), and every :meth:`watch_queue`, in any process, reads the events
    appended after it opened.  The log is capped (the backend documents its bound: it keeps
    at least the last 1,000 events of a queue and at most about 20,000); a watch that falls
    further behind than the cap loses the oldest events and is told so
    (:attr:`EventRead.missed`).
    """

    capability = "queue_events"
    refusal: ClassVar[Refusal | None] = (
        "queue/watch-unsupported",
        "carry a queue's events between processes (Queue.watch)",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    async def publish_events(self, queue: str, events: Sequence[str], *, now: float) -> None:
        """Append ``events`` (opaque text from the core, one compact JSON object each, holding
        no payload, result or error text) to the log of ``queue``, in this order, in one step:
        every watch sees all of them or none, and never a later event before an earlier one
        of the same call.  The core calls it off the path that runs handlers, with every
        event one process raised since its last call, so it must cost one cheap write (one
        statement, one script).  Trim the log to the backend's cap in the same step."""

    @abc.abstractmethod
    async def mark_watched(self, queue: str, *, until: float, now: float) -> None:
        """Note that a :meth:`watch_queue` of ``queue`` is open, in some process, until
        ``until`` (the watcher renews it well before then).  Keep the latest ``until``."""

    @abc.abstractmethod
    async def is_watched(self, queue: str, *, now: float) -> bool:
        """Whether a :meth:`mark_watched` of ``queue`` still holds at ``now``: one cheap read
        (a key, a row), asked by each publishing process at most about once a second."""

    @abc.abstractmethod
    @contextlib.asynccontextmanager
    async def watch_queue(self, queue: str) -> AsyncIterator[QueueFeed]:
        """Open a cursor at the end of the log of ``queue`` *before* yielding, so every event
        appended after entering is read, and nothing appended before.  Yield a
        :class:`QueueFeed` subclass; the cursor is closed when the context exits."""
        yield QueueFeed()  # pragma: no cover - abstract


class RetentionLimits(Backend):
    """Facet: pruning finished jobs beyond ``retain_done`` (SPEC §3.12): dead jobs by age
    (``retain_dead``) and each queue's finished jobs by count (``retain_done_count``,
    ``retain_dead_count``).  A backend without it keeps dead jobs until they are retried or
    purged, and the core refuses those three options when the queue is built."""

    capability = "retention_limits"
    refusal: ClassVar[Refusal | None] = (
        "queue/retention-unsupported",
        "prune dead jobs by age or finished jobs by count (the options retain_dead, "
        "retain_done_count and retain_dead_count; remove them to keep dead jobs until they "
        "are retried or purged)",
        "e.g. 'local', 'redis' or 'memory'",
    )

    @abc.abstractmethod
    async def prune_finished(self, *, now: float, retention: Retention) -> int:
        """Delete, on every queue, the finished jobs ``retention`` no longer keeps; returns
        how many.  Called by the core right after :meth:`Backend.sweep` (which prunes by
        ``retain_done``), only when a limit is set:

        * with ``retention.dead_cutoff(now)`` not ``None``, ``dead`` jobs that finished
          before it;
        * with ``retention.done_count`` set, each queue's ``done`` and ``cancelled`` jobs
          (one pool) beyond that many, the least recently finished first;
        * with ``retention.dead_count`` set, each queue's ``dead`` jobs beyond that many,
          the least recently finished first.

        A deleted job takes what is stored with it (its result, its unique key, its place in
        its flow) as :meth:`Backend.purge` does.  Each deletion may be a step of its own, but
        none may read every stored job: walk an index or sorted set ordered by
        ``finished_at``.
        """


class JobEdits(Inspection):
    """Facet: editing a waiting job, and running a finished one again, by id
    (``Queue.promote``, ``change_delay``, ``change_priority``, ``update_payload``,
    ``rerun``).  ``update_payload`` reads the job first (its queue, flow and ``meta`` are the
    place its new payload is sealed for), so this facet needs :class:`Inspection` too.

    Each method is **one atomic step** in the store (one statement, one script, one critical
    section), conditional on the job's state at that moment, never a read followed by a write
    decided on it: an edit racing a lease either lands before it (the lease sees the edited
    job) or finds the job ``inflight`` and changes nothing.  ``inflight`` jobs are never
    edited.  Each returns ``None`` when the store holds no job ``job_id``, else an
    :class:`EditOutcome`: the job as stored after the call, whether the edit applied, and the
    state the job was in.  A pending job that an edit makes due (or due sooner) must reach
    consumers as an enqueue would: a store that wakes idle consumers of other processes on
    enqueue (:class:`Wakeup`, a signal list, a notification) does so here too, so a consumer
    waiting for the old due time (:class:`NextDue`) starts the job at the new one.  Same-process
    consumers are woken by the core.
    """

    capability = "job_edits"
    refusal: ClassVar[Refusal | None] = (
        "queue/job-edits-unsupported",
        "edit or rerun a job by id",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    async def promote(self, job_id: str, *, now: float) -> EditOutcome | None:
        """Make a ``pending`` job whose ``available_at`` is later than ``now`` due at ``now``
        (leasing order then ranks it by that ``available_at``).  Applies to nothing else: a
        job already due, ``parked``, ``inflight`` or finished is left as it is."""

    @abc.abstractmethod
    async def change_delay(
        self, job_id: str, *, available_at: float, now: float
    ) -> EditOutcome | None:
        """Set the ``available_at`` of a ``pending`` job (due or delayed) to ``available_at``
        (the core passes ``now + seconds``; ``now`` is the caller's clock, for a store that
        files due and delayed jobs apart).  Applies to nothing else: a ``parked`` job waits
        for its dependencies, not for a time."""

    @abc.abstractmethod
    async def change_priority(self, job_id: str, *, priority: int) -> EditOutcome | None:
        """Set the ``priority`` of a ``pending`` (due or delayed) or ``parked`` job; leasing
        order follows the new priority from the next lease on.  Applies to nothing else."""

    @abc.abstractmethod
    async def update_payload(
        self, job_id: str, payload: str, *, queue: str, flow_id: str | None, meta: str | None
    ) -> EditOutcome | None:
        """Replace the payload of a ``pending`` (due or delayed) or ``parked`` job with
        ``payload`` (opaque text from the core, stored verbatim, as in :meth:`enqueue`).

        The core sealed ``payload`` for the job's place as it read it: ``queue``, ``flow_id``
        and ``meta``.  Apply only when the job still has exactly those (a job purged and
        enqueued again under the same id meanwhile has another place): otherwise change
        nothing and answer ``applied=False``, and the core reads the job again.  Applies to
        no other state."""

    @abc.abstractmethod
    async def rerun(self, job_id: str, *, now: float) -> EditOutcome | None:
        """Move a ``done``, ``dead`` or ``cancelled`` job back to ``pending``, due at ``now``,
        with ``attempts = 0``, as :meth:`DeadLetters.dlq_retry` does for a dead one: no
        ``finished_at``, no ``result``, no lease (an old token settles and extends nothing),
        and without its unique key (it holds none; an enqueue with that key stores a new
        job).  ``last_error`` stays, as after ``dlq_retry``.  The job leaves the indexes of its
        finished state (retention, the DLQ).  Applies to no live state (``pending``,
        ``inflight``, ``parked``).  A flow job's parked dependants stay parked until it is
        ``done`` again."""


class JobIds(Backend):
    """Facet: ids chosen by the caller (``enqueue(..., job_id="order-42")``), which make
    producers idempotent: enqueueing an id the store already holds stores nothing."""

    capability = "job_ids"
    refusal: ClassVar[Refusal | None] = (
        "queue/job-ids-unsupported",
        "look a job up by a chosen id and store it only when that id is absent",
        "e.g. 'local', 'redis', 'memory'",
    )

    @abc.abstractmethod
    async def enqueue_absent(self, jobs: Sequence[NewJob]) -> list[bool]:
        """Store each job of ``jobs`` whose id the store does not hold, in any state (pending,
        delayed, inflight, parked, done, dead, cancelled: as long as it is stored); leave a
        stored job with that id exactly as it is (no field, payload included, changes).
        Returns, per job in order, whether this call stored it.

        One atomic step in the store (one statement or transaction, one script), so of any
        number of concurrent calls with one id, from any process, exactly one stores its job.
        Within one call a later job with the id of an earlier one is not stored (``False``).
        The jobs stored keep the order of ``jobs`` as their enqueue order, as
        :meth:`Backend.enqueue`.  A call retried after its reply was lost may answer ``True``
        for a job it finds stored exactly as sent (same ``created_at`` and ``payload``).

        The ids are 1 to 128 characters of ASCII letters, digits and ``-_.:@`` (checked by
        the core): no spaces, no braces, safe in keys and file names.  A store that keeps
        jobs apart per queue (a Redis Cluster slot per queue) may look for the id among the
        jobs of ``job.queue`` only, and says so in its documentation.
        """


class Lifo(Backend):
    """Facet: last in, first out (``enqueue(..., lifo=True)``).  :meth:`Backend.lease` (and
    :meth:`LimitedLease.lease_limited`) take a due job stored with :attr:`NewJob.lifo` ahead
    of every due job of its priority that was already waiting when it became due.  Among one
    priority the order is then: the lifo jobs, the one due latest first (ties: the one
    enqueued latest first), then the other jobs in the usual order (earlier ``available_at``
    first, then enqueue order).  A delayed lifo job is due once its ``available_at`` passes,
    so it goes ahead of the jobs waiting at that moment; a retry of a lifo job (due after its
    backoff), a released one and one back from the DLQ are lifo again.  No methods of its own.
    """

    capability = "lifo"
    refusal: ClassVar[Refusal | None] = (
        "queue/lifo-unsupported",
        "lease a job ahead of the due jobs already waiting (lifo=True)",
        "e.g. 'memory'",
    )


class Wakeup(Backend):
    """Facet: :meth:`wait_for_work` returns early when another process enqueues (a blocking
    pop, a notification, a file's change), so an idle consumer starts new work at once instead
    of at its next poll."""

    capability = "cross_process_wakeup"

    @abc.abstractmethod
    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Return when work may have arrived from another process, or after ``timeout``.

        Return as soon as another process may have enqueued to ``queue``.  Same-process
        enqueues wake consumers in the core; a backend need not handle them.
        """


class NextDue(Backend):
    """Facet: when a queue's next job is due, so an idle consumer's wait ends at the earliest
    delayed job or backoff retry instead of at its next poll (SPEC §3 item 13).  Without it a
    delayed job starts at the first poll after it is due (``poll_interval``)."""

    capability = "next_due"

    @abc.abstractmethod
    async def next_due(self, queue: str, *, now: float) -> float | None:
        """The earliest ``available_at`` among the ``pending`` jobs of ``queue``, or ``None``
        when it has none.  ``now`` is the caller's clock: a value at or before it means a job
        is due already (the core then keeps its usual wait, as a job it could not lease is held
        back by a limit).  Asked by an idle consumer after each empty lease, so it must cost
        one cheap read (an index seek), never a walk through the backlog.
        """


class WaitAndLease(Wakeup):
    """Facet (speed only): an idle consumer's wait and its lease in one exchange with the
    store.  Without it the core calls :meth:`Backend.wait_for_work`, then :meth:`Backend.lease`.
    """

    capability = "wait_and_lease"

    @abc.abstractmethod
    async def wait_and_lease(
        self, queue: str, *, timeout: float, limit: int, now: float, lease_seconds: float
    ) -> list[Lease] | None:
        """:meth:`wait_for_work`, then, when work came, :meth:`lease` in the same exchange with
        the store, as it would have leased at the moment the wait ended: an idle consumer on a
        server backend gets its jobs without a round trip of its own.  ``now`` is the caller's
        clock when it starts waiting; the lease happens at that clock moved on by the time the
        wait took (a backend may read its context's clock again as it sends the wait).

        ``None``: the backend only waited; the caller leases itself.  A list (maybe empty):
        what was leased.  When the caller is cancelled, nothing stays leased to it: the backend
        gives back what the wait may have taken.
        """


class OverlappedLease(Backend):
    """Facet (speed only): consumers may lease in halves of their concurrency, so the next
    lease is on its way while the handlers of the last one run."""

    capability = "overlapped_lease"

    @property
    @abc.abstractmethod
    def overlapped_lease(self) -> bool:
        """True when, for this backend as opened, a lease costs this process little CPU while
        it waits (the work is done by a server, the wait is asynchronous I/O).  False where the
        overlap would cost as much as it saves (calls made through worker threads)."""


FACETS: tuple[type[Backend], ...] = (
    DeadLetters,
    Flows,
    FlowPolicies,
    CrossQueueFlows,
    Records,
    Uniqueness,
    RateLimits,
    GroupLimits,
    Inspection,
    Results,
    JobEvents,
    Cancellation,
    QueueEvents,
    RetentionLimits,
    JobEdits,
    JobIds,
    Lifo,
    Wakeup,
    NextDue,
    WaitAndLease,
    OverlappedLease,
)
"""Every optional facet, each naming the capability it gives (``capability``)."""
