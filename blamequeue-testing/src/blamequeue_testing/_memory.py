"""Protocol ``memory``: the whole backend contract in process memory, for test suites.

Every transition happens under one lock with no ``await`` inside, so it is atomic with respect
to other tasks and threads.  Time comes only from the ``now`` values the core passes (so a
:class:`~blamequeue_testing.VirtualClock` drives it); the only waiting it does,
:meth:`MemoryBackend.wait_for_work`, sleeps on the queue's clock.

Leasing never scans the backlog.  Per queue, pending jobs sit in one of two heaps: *ready*
(due, keyed ``(-priority, available_at, seq)``, a lifo job ahead of its priority's others, the
latest due first) and *delayed* (keyed ``(available_at, seq)``);
a lease first moves the delayed jobs that have come due into the ready heap.  Heap entries are
deleted lazily: each carries the job's version at push time, and any transition bumps the
version, so an entry that no longer describes its job is skipped when it surfaces.  Inflight
leases and retained ``done`` jobs have heaps of their own for the sweep; per queue, finished
jobs (``done`` and ``cancelled`` in one heap, ``dead`` in another) are filed by ``finished_at``
when they finish, for the retention limits (:meth:`MemoryBackend.prune_finished`), which pop
them from the oldest end.

Flows: a ``parked`` job sits in no heap (it is never leased); it is filed under each id in its
``depends_on``, so a ``done`` settlement looks only at the jobs waiting on that one job, and is
released in the same locked step once every dependency is ``done`` or gone.  A job that ends
``dead`` or ``cancelled`` walks the same lists, in the same locked step, for the jobs whose
``on_dependency_failure`` is ``"fail"`` (dead too, and so on down the graph) or ``"ignore"``
(released once the rest is done).  The flow index is the store's, not a queue's, so a flow's
jobs may sit on several queues.

Options: ``namespace`` (optional string).  Backends built with the same namespace share one
store, like several workers on one database; without it each backend has a private store.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio
import anyio.lowlevel

from blamequeue.abc import (
    JOB_STATES,
    UNIQUE_HOLDING_STATES,
    BackendContext,
    Cancellation,
    CancelOutcome,
    CrossQueueFlows,
    DeadLetters,
    EditOutcome,
    EventRead,
    FlowPolicies,
    Flows,
    GroupLimits,
    JobCursor,
    JobEdits,
    JobEvents,
    JobIds,
    JobState,
    JobWatch,
    Lease,
    LeaseLimits,
    Lifo,
    NewJob,
    NextDue,
    OptionReader,
    QueueEvents,
    QueueFeed,
    QueueStats,
    RateLimits,
    Record,
    Records,
    Results,
    Retention,
    RetentionLimits,
    Settlement,
    StoredJob,
    StoredJobPage,
    SweepResult,
    Uniqueness,
    WorkerRecord,
    check_settlements,
    outcome_rule,
)
from blamequeue.errors import BadArgumentError

__all__ = ["MemoryBackend"]

_LIVE: tuple[JobState, ...] = ("pending", "inflight", "parked")
# What a dependency may be for a job that ignores its failure to count as out of its way.
_GONE_FOR_IGNORE: tuple[JobState, ...] = ("done", "dead", "cancelled")


class _Row:
    """One stored job (mutable; never handed out: callers get :class:`StoredJob` snapshots)."""

    __slots__ = (
        "attempts",
        "available_at",
        "classification",
        "created_at",
        "dead_order",
        "dependants_error",
        "depends_on",
        "expires_at",
        "finished_at",
        "flow_id",
        "group_key",
        "id",
        "last_error",
        "lifo",
        "max_attempts",
        "meta",
        "on_dependency_failure",
        "payload",
        "priority",
        "queue",
        "result",
        "seq",
        "state",
        "token",
        "trace_id",
        "unique_key",
        "unique_until",
        "version",
    )

    def __init__(self, job: NewJob, seq: int) -> None:
        self.id = job.id
        self.queue = job.queue
        self.state: JobState = "parked" if job.parked else "pending"
        self.payload = job.payload
        self.priority = job.priority
        self.attempts = 0
        self.max_attempts = job.max_attempts
        self.created_at = job.created_at
        self.available_at = job.available_at
        self.classification = job.classification
        self.trace_id = job.trace_id
        self.last_error: str | None = None
        self.meta = job.meta
        self.flow_id = job.flow_id
        self.depends_on = tuple(job.depends_on)
        self.on_dependency_failure = job.on_dependency_failure
        self.dependants_error = job.dependants_error
        self.group_key = job.group_key
        self.lifo = job.lifo
        self.finished_at: float | None = None
        self.result: str | None = None
        self.token: str | None = None
        self.expires_at = 0.0
        self.seq = seq  # enqueue order: the last tie-breaker of leasing order
        self.dead_order = 0  # when it became dead: the tie-breaker of dlq_list
        self.version = 0
        self.unique_key: str | None = None  # set by enqueue_unique, dropped by dlq_retry
        self.unique_until: float | None = None

    def snapshot(self) -> StoredJob:
        return StoredJob(
            id=self.id,
            queue=self.queue,
            state=self.state,
            payload=self.payload,
            priority=self.priority,
            attempts=self.attempts,
            max_attempts=self.max_attempts,
            created_at=self.created_at,
            available_at=self.available_at,
            classification=self.classification,
            trace_id=self.trace_id,
            last_error=self.last_error,
            meta=self.meta,
            flow_id=self.flow_id,
            depends_on=self.depends_on,
            finished_at=self.finished_at,
            group_key=self.group_key,
            result=self.result,
        )


# Heap entries end with (version, row): the version makes them unique before the row is
# reached, and lets a stale entry be recognised (row.version moved on).
# (-priority, (lane, time), seq, version, row): lane 0 holds the lifo jobs, latest due (then
# latest enqueued) first, lane 1 the others, earliest due (then earliest enqueued) first.
_ReadyEntry = tuple[int, tuple[int, float], int, int, _Row]
_TimedEntry = tuple[float, int, int, _Row]  # (time, seq, version, row)


def _ready_entry(row: _Row) -> _ReadyEntry:
    if row.lifo:
        return (-row.priority, (0, -row.available_at), -row.seq, row.version, row)
    return (-row.priority, (1, row.available_at), row.seq, row.version, row)


class _QueueIndex:
    __slots__ = ("counts", "dead", "delayed", "finished", "horizon", "ready", "rows")

    def __init__(self) -> None:
        self.rows: dict[str, _Row] = {}
        self.counts: dict[JobState, int] = dict.fromkeys(
            ("pending", "inflight", "done", "dead", "parked", "cancelled"), 0
        )
        self.ready: list[_ReadyEntry] = []
        self.delayed: list[_TimedEntry] = []
        # The retention limits: done and cancelled jobs, and dead ones, by finished_at.
        self.finished: list[_TimedEntry] = []
        self.dead: list[_TimedEntry] = []
        # The latest ``now`` a lease has seen: a job due by then goes straight to ``ready``.
        # A lease with an earlier ``now`` re-checks every entry it takes, so this only saves
        # work, it never decides.
        self.horizon = float("-inf")


class _MemoryWatch(JobWatch):
    """A watch on one job: settlements and progress events pushed by the store, in order."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.events: deque[str | None] = deque()
        self.signal = anyio.Event()

    def push(self, event: str | None) -> None:
        self.events.append(event)
        self.signal.set()

    async def next_event(self, timeout: float) -> str | None:
        if not self.events:
            self.signal = anyio.Event()
            await self.first_of(timeout, self.signal.wait)
        return self.events.popleft() if self.events else None


#: Events a queue's log keeps (the oldest dropped first), whatever their age.
EVENT_LOG_CAP = 10_000


class _EventLog:
    """One queue's event log (``Queue.watch``): the last :data:`EVENT_LOG_CAP` events, the
    position of the first, and the feeds waiting for more."""

    __slots__ = ("events", "first", "waiters")

    def __init__(self) -> None:
        self.events: deque[str] = deque(maxlen=EVENT_LOG_CAP)
        self.first = 0
        self.waiters: set[anyio.Event] = set()

    @property
    def end(self) -> int:
        return self.first + len(self.events)

    def append(self, events: Sequence[str]) -> None:
        for event in events:
            if len(self.events) == EVENT_LOG_CAP:
                self.first += 1
            self.events.append(event)
        for waiter in self.waiters:
            waiter.set()


class _MemoryFeed(QueueFeed):
    """A cursor in one queue's :class:`_EventLog`; publishing wakes it."""

    def __init__(self, store: _Store, log: _EventLog) -> None:
        self._store = store
        self._log = log
        self.cursor = log.end
        self.signal = anyio.Event()

    async def read(self, timeout: float) -> EventRead:
        log = self._log
        if log.end == self.cursor and timeout > 0:
            with anyio.move_on_after(timeout):
                await self.signal.wait()
        else:
            await anyio.lowlevel.checkpoint()
        with self._store.lock:
            log.waiters.discard(self.signal)
            self.signal = anyio.Event()
            log.waiters.add(self.signal)
            start = max(self.cursor, log.first)
            events = list(itertools.islice(log.events, start - log.first, None))
            missed = start > self.cursor
            self.cursor = log.end
        return EventRead(events=events, missed=missed)


class _Record:
    __slots__ = ("counters", "expires_at", "tokens", "value")

    def __init__(self) -> None:
        self.value: bytes | None = None
        self.counters: dict[str, float] = {}
        self.expires_at: float | None = None
        self.tokens: set[str] = set()

    def snapshot(self, kind: str, key: str) -> Record:
        return Record(
            kind=kind,
            key=key,
            value=self.value,
            counters=dict(self.counters),
            expires_at=self.expires_at,
        )


def _file(heap: list[_TimedEntry], row: _Row, live: int) -> None:
    """File a finished ``row`` in one of its queue's retention heaps; once stale entries (of
    rows deleted or moved on since) outnumber the ``live`` ones, drop them, so a heap nothing
    pops stays as large as what it files."""
    heapq.heappush(heap, (row.finished_at or 0.0, row.seq, row.version, row))
    if len(heap) > 2 * live + 64:
        heap[:] = [entry for entry in heap if entry[3].version == entry[2]]
        heapq.heapify(heap)


def _expired(record: _Record, now: float) -> bool:
    return record.expires_at is not None and record.expires_at <= now


class _Store:
    """The jobs of one backend, or of every backend sharing a namespace."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, _Row] = {}
        self.queues: dict[str, _QueueIndex] = {}
        self.leases: list[_TimedEntry] = []  # inflight, keyed by expires_at
        self.retained: list[_TimedEntry] = []  # done and cancelled, keyed by finished_at
        self.seq = itertools.count(1)
        self.waiters: dict[str, set[anyio.Event]] = {}
        # Flows: parked jobs by the id of each job they wait for, and every job by flow id.
        self.dependants: dict[str, list[_Row]] = {}
        self.flows: dict[str, dict[str, _Row]] = {}
        self.workers: dict[str, WorkerRecord] = {}  # the worker registry, by id
        # Fleet-wide rate limits: per queue, [tokens, refilled_at] of its token bucket.
        self.buckets: dict[str, list[float]] = {}
        # Unique jobs: (queue, key) -> the last job that took the key.  Whether it still
        # holds it is decided when asked (holder()), so no transition has to release keys.
        self.unique: dict[tuple[str, str], _Row] = {}
        self.watches: dict[str, set[_MemoryWatch]] = {}  # open watch_job()s, by job id
        self.records: dict[str, dict[str, _Record]] = {}  # shared records, by kind then key
        self.event_logs: dict[str, _EventLog] = {}  # Queue.watch: per queue
        self.watched: dict[str, float] = {}  # Queue.watch: per queue, until when

    def new_record(self, kind: str, key: str) -> _Record:
        record = self.records.setdefault(kind, {})[key] = _Record()
        return record

    def live_record(self, kind: str, key: str, now: float) -> _Record | None:
        record = self.records.get(kind, {}).get(key)
        if record is not None and record.expires_at is not None and record.expires_at <= now:
            del self.records[kind][key]
            return None
        return record

    def tell(self, job_id: str, event: str | None) -> None:
        """Push ``event`` (``None``: the job changed state) to the watches of ``job_id``."""
        for watch in self.watches.get(job_id, ()):
            watch.push(event)

    def index(self, queue: str) -> _QueueIndex:
        index = self.queues.get(queue)
        if index is None:
            index = self.queues[queue] = _QueueIndex()
        return index

    # -- transitions (caller holds the lock) --------------------------------------------------
    def move(self, row: _Row, state: JobState) -> None:
        index = self.queues[row.queue]
        counts = index.counts
        counts[row.state] -= 1
        counts[state] += 1
        row.state = state
        row.version += 1
        if state == "dead":
            _file(index.dead, row, counts["dead"])
        elif state in ("done", "cancelled"):
            _file(index.finished, row, counts["done"] + counts["cancelled"])
        if self.watches and state in ("done", "dead"):
            self.tell(row.id, None)

    def prune_finished(self, retention: Retention, now: float) -> int:
        """Delete the finished jobs ``retention`` no longer keeps; returns how many."""
        pruned = 0
        dead_cutoff = retention.dead_cutoff(now)
        for index in list(self.queues.values()):
            if dead_cutoff is not None or retention.dead_count is not None:
                pruned += self._trim(
                    index, index.dead, ("dead",), retention.dead_count, dead_cutoff
                )
            if retention.done_count is not None:
                pruned += self._trim(
                    index, index.finished, ("done", "cancelled"), retention.done_count
                )
        return pruned

    def _trim(
        self,
        index: _QueueIndex,
        heap: list[_TimedEntry],
        states: tuple[JobState, ...],
        keep: int | None,
        before: float | None = None,
    ) -> int:
        """Delete the rows of one queue's ``heap`` from the least recently finished while
        more than ``keep`` rows are in ``states`` or the oldest finished before ``before``."""
        pruned = 0
        while heap:
            finished_at, _, version, row = heap[0]
            if row.version == version:
                over = keep is not None and sum(index.counts[state] for state in states) > keep
                if not over and (before is None or finished_at >= before):
                    break
                self.delete(row)
                pruned += 1
            heapq.heappop(heap)
        return pruned

    def pend(self, row: _Row) -> None:
        """File a row that is now ``pending`` (its version already bumped) in a heap."""
        index = self.queues[row.queue]
        if row.available_at <= index.horizon:
            heapq.heappush(index.ready, _ready_entry(row))
        else:
            heapq.heappush(index.delayed, (row.available_at, row.seq, row.version, row))

    def add(self, row: _Row) -> None:
        index = self.index(row.queue)
        index.rows[row.id] = row
        index.counts[row.state] += 1
        self.jobs[row.id] = row
        if row.flow_id is not None:
            self.flows.setdefault(row.flow_id, {})[row.id] = row
        if row.state == "parked":
            for dep in row.depends_on:
                self.dependants.setdefault(dep, []).append(row)
        elif row.state == "pending":
            self.pend(row)

    def delete_in(self, queue: str, states: tuple[JobState, ...]) -> list[_Row]:
        """Delete the jobs of ``queue`` in ``states``; returns them."""
        index = self.queues.get(queue)
        doomed = [] if index is None else [r for r in index.rows.values() if r.state in states]
        for row in doomed:
            self.delete(row)
        return doomed

    def delete(self, row: _Row) -> None:
        index = self.queues[row.queue]
        index.counts[row.state] -= 1
        del index.rows[row.id]
        del self.jobs[row.id]
        row.version += 1  # every heap entry of this row is now stale
        row.token = None
        if self.watches:
            self.tell(row.id, None)
        if row.flow_id is not None:
            members = self.flows.get(row.flow_id)
            if members is not None:
                members.pop(row.id, None)
                if not members:
                    del self.flows[row.flow_id]
        # A deleted job is never settled again: nothing will look up who waits on it.
        self.dependants.pop(row.id, None)
        if row.unique_key is not None and self.unique.get((row.queue, row.unique_key)) is row:
            del self.unique[(row.queue, row.unique_key)]

    def release(self, waiting: list[_Row], at: float) -> set[str]:
        """A job just became ``done`` (or was deleted as done, or died): make each job of
        ``waiting`` (those parked behind it) ``pending``, due at ``at``, once all its
        dependencies are done or gone (or, for a job that ignores them, dead or cancelled).
        Returns the queues that got due jobs."""
        queues: set[str] = set()
        for child in waiting:
            if child.state != "parked" or self.jobs.get(child.id) is not child:
                continue  # purged meanwhile
            settled = _GONE_FOR_IGNORE if child.on_dependency_failure == "ignore" else ("done",)
            if all(
                (dep := self.jobs.get(dep_id)) is None or dep.state in settled
                for dep_id in child.depends_on
            ):
                child.available_at = at
                self.move(child, "pending")
                self.pend(child)
                queues.add(child.queue)
        return queues

    def wait_again(self, row: _Row) -> None:
        """``row``, ``done``, runs again: the jobs of its flow still parked behind it wait for
        it again (settle dropped its ``dependants`` entry when it was done)."""
        assert row.flow_id is not None
        waiting = [
            member
            for member in self.flows.get(row.flow_id, {}).values()
            if member.state == "parked" and row.id in member.depends_on
        ]
        if waiting:
            self.dependants[row.id] = waiting

    def fell(self, row: _Row, at: float) -> set[str]:
        """``row`` just became ``dead`` or ``cancelled`` at ``at``: the jobs parked behind it
        follow their ``on_dependency_failure`` (``"fail"``: dead too, and their own dependants
        in turn; ``"ignore"``: released when the rest is done; ``"wait"``: nothing).  Returns
        the queues that got due jobs."""
        queues: set[str] = set()
        fallen = [row]
        while fallen:
            gone = fallen.pop()
            for child in self.dependants.get(gone.id, ()):
                if child.state != "parked" or self.jobs.get(child.id) is not child:
                    continue
                if child.on_dependency_failure == "fail":
                    child.last_error = gone.dependants_error
                    child.finished_at = at
                    child.dead_order = next(self.seq)
                    self.move(child, "dead")
                    fallen.append(child)
                elif child.on_dependency_failure == "ignore":
                    queues |= self.release([child], at)
        return queues

    def promote(self, index: _QueueIndex, now: float) -> None:
        """Move the delayed jobs of ``index`` due by ``now`` to its ready heap."""
        if now > index.horizon:
            index.horizon = now
        ready, delayed = index.ready, index.delayed
        while delayed and delayed[0][0] <= now:
            _, _, version, row = heapq.heappop(delayed)
            if row.version == version:
                heapq.heappush(ready, _ready_entry(row))

    def take(self, index: _QueueIndex, row: _Row, token: str, expires_at: float) -> Lease:
        """Lease one pending row (its ready entry already popped)."""
        index.counts["pending"] -= 1
        index.counts["inflight"] += 1
        row.state = "inflight"
        row.attempts += 1
        row.token = token
        row.expires_at = expires_at
        row.version += 1
        heapq.heappush(self.leases, (expires_at, row.seq, row.version, row))
        return Lease(job=row.snapshot(), token=token, expires_at=expires_at)

    def holder(self, queue: str, key: str, now: float) -> _Row | None:
        """The job holding unique ``key`` in ``queue`` at ``now``, if any."""
        row = self.unique.get((queue, key))
        if (
            row is None
            or self.jobs.get(row.id) is not row
            or row.state not in UNIQUE_HOLDING_STATES
            or row.unique_key != key
            or (row.unique_until is not None and row.unique_until <= now)
        ):
            return None
        return row

    def notify(self, queue: str) -> None:
        waiters = self.waiters.pop(queue, None)
        if waiters:
            for event in waiters:
                event.set()


def _refill(store: _Store, queue: str, now: float, limits: LeaseLimits) -> int:
    """Refill the queue's token bucket up to ``now``; return the whole tokens it holds."""
    assert limits.rate_max is not None
    assert limits.rate_per_seconds is not None
    bucket = store.buckets.get(queue)
    if bucket is None:
        bucket = store.buckets[queue] = [float(limits.rate_max), now]
    elif now > bucket[1]:
        rate = limits.rate_max / limits.rate_per_seconds
        bucket[0] = min(float(limits.rate_max), bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
    # The epsilon absorbs float error: 0.1 s at 10/s refills 0.9999... tokens, not 1.
    return max(0, math.floor(bucket[0] + 1e-9))


_namespaces: dict[str, _Store] = {}
_namespaces_lock = threading.Lock()


def _shared_store(namespace: str) -> _Store:
    with _namespaces_lock:
        store = _namespaces.get(namespace)
        if store is None:
            store = _namespaces[namespace] = _Store()
        return store


class MemoryBackend(
    Cancellation,
    CrossQueueFlows,
    DeadLetters,
    FlowPolicies,
    Flows,
    GroupLimits,
    JobEdits,
    JobEvents,
    JobIds,
    Lifo,
    NextDue,
    QueueEvents,
    RateLimits,
    Records,
    Results,
    RetentionLimits,
    Uniqueness,
):
    """The ``memory`` protocol: full blamequeue semantics (SPEC §3) in process memory.

    Nothing survives the process.  ``{"protocol": "memory"}`` gives a private store per backend;
    ``{"protocol": "memory", "namespace": "shop"}`` shares one store with every backend of this
    process built with the same namespace (two ``Queue`` objects then act like two workers on
    one database).  :meth:`forget_namespace` drops a shared store.
    """

    protocol: ClassVar[str] = "memory"
    ephemeral: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        read = OptionReader(
            self.options,
            backend=f"backend {context.name!r} (protocol 'memory')",
            known=("namespace",),
        )
        namespace = read.text("namespace")
        self._store = _Store() if namespace is None else _shared_store(namespace)
        self.namespace: str | None = namespace

    @staticmethod
    def forget_namespace(namespace: str) -> None:
        """Drop the shared store of ``namespace``; backends built later start empty."""
        with _namespaces_lock:
            _namespaces.pop(namespace, None)

    # -- producing -------------------------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            seen: set[str] = set()
            for job in jobs:  # check everything first: all jobs or none
                if job.id in store.jobs or job.id in seen:
                    raise BadArgumentError(
                        "queue/bad-argument", f"a job with id {job.id!r} already exists"
                    )
                seen.add(job.id)
            queues: set[str] = set()
            for job in jobs:
                row = _Row(job, next(store.seq))
                store.add(row)
                if row.state == "pending":
                    queues.add(row.queue)
            for queue in queues:
                store.notify(queue)

    async def enqueue_absent(self, jobs: Sequence[NewJob]) -> list[bool]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            stored: list[bool] = []
            queues: set[str] = set()
            for job in jobs:
                if job.id in store.jobs:
                    stored.append(False)
                    continue
                row = _Row(job, next(store.seq))
                store.add(row)
                stored.append(True)
                if row.state == "pending":
                    queues.add(row.queue)
            for queue in queues:
                store.notify(queue)
            return stored

    async def enqueue_unique(
        self, job: NewJob, *, unique_key: str, hold_until: float | None, now: float
    ) -> str:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            holder = store.holder(job.queue, unique_key, now)
            if holder is not None:
                return holder.id
            if job.id in store.jobs:
                raise BadArgumentError(
                    "queue/bad-argument", f"a job with id {job.id!r} already exists"
                )
            row = _Row(job, next(store.seq))
            row.unique_key, row.unique_until = unique_key, hold_until
            store.add(row)
            store.unique[(job.queue, unique_key)] = row
            if row.state == "pending":
                store.notify(row.queue)
            return job.id

    # -- consuming -------------------------------------------------------------------------
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            index = store.queues.get(queue)
            if index is None or limit < 1:
                return []
            store.promote(index, now)
            ready, delayed = index.ready, index.delayed
            token = secrets.token_hex(8)
            expires_at = now + lease_seconds
            leases: list[Lease] = []
            while ready and len(leases) < limit:
                *_, version, row = heapq.heappop(ready)
                if row.version != version:
                    continue
                if row.available_at > now:  # a caller's clock went backwards: not due yet
                    heapq.heappush(delayed, (row.available_at, row.seq, version, row))
                    continue
                leases.append(store.take(index, row, token, expires_at))
            return leases

    async def next_due(self, queue: str, *, now: float) -> float | None:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            index = store.queues.get(queue)
            if index is None:
                return None
            store.promote(index, now)
            for *_, version, row in index.ready:
                if row.version == version:
                    return min(now, row.available_at)  # one is due (a limit held it back)
            delayed = index.delayed
            while delayed and delayed[0][3].version != delayed[0][2]:
                heapq.heappop(delayed)  # left by a job that changed since it was delayed
            return delayed[0][0] if delayed else None

    async def lease_limited(
        self, queue: str, *, limit: int, now: float, lease_seconds: float, limits: LeaseLimits
    ) -> list[Lease]:
        """:meth:`lease` under fleet-wide limits, in the same locked step.

        Jobs of a group at its limit are popped, set aside and pushed back, so a lease costs
        the jobs of saturated groups ahead of the eligible ones (and counting a group's
        inflight jobs scans the queue): fine for a store that lives in a test process.
        """
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            index = store.queues.get(queue)
            if limits.rate_max is not None:
                limit = min(limit, _refill(store, queue, now, limits))
            if index is None or limit < 1:
                return []
            store.promote(index, now)
            ready, delayed = index.ready, index.delayed
            cap = limits.group_concurrency
            busy: dict[str, int] = {}
            if cap is not None:
                for row in index.rows.values():
                    if row.state == "inflight" and row.group_key is not None:
                        busy[row.group_key] = busy.get(row.group_key, 0) + 1
            token = secrets.token_hex(8)
            expires_at = now + lease_seconds
            leases: list[Lease] = []
            skipped: list[_ReadyEntry] = []
            while ready and len(leases) < limit:
                entry = heapq.heappop(ready)
                *_, version, row = entry
                if row.version != version:
                    continue
                if row.available_at > now:
                    heapq.heappush(delayed, (row.available_at, row.seq, version, row))
                    continue
                group = row.group_key
                if cap is not None and group is not None:
                    if busy.get(group, 0) >= cap:
                        skipped.append(entry)
                        continue
                    busy[group] = busy.get(group, 0) + 1
                leases.append(store.take(index, row, token, expires_at))
            for entry in skipped:
                heapq.heappush(ready, entry)
            if limits.rate_max is not None:
                store.buckets[queue][0] -= len(leases)
            return leases

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        await anyio.lowlevel.checkpoint()
        check_settlements(settlements)  # an unknown outcome refuses the batch: nothing changes
        store = self._store
        applied: list[bool] = []
        with store.lock:
            pended: set[str] = set()
            for item in settlements:
                row = store.jobs.get(item.job_id)
                if row is None or row.state != "inflight" or row.token != item.token:
                    applied.append(False)
                    continue
                row.token = None
                rule = outcome_rule(item.outcome)
                if rule.gives_back_attempt:
                    row.attempts = max(0, row.attempts - 1)
                if rule.sets_error or item.error is not None:
                    row.last_error = item.error
                if rule.finishes:
                    row.finished_at = item.at
                else:
                    row.available_at = item.at
                if item.outcome == "done":
                    waiting = store.dependants.pop(row.id, None)
                    row.result = item.result
                    if item.keep:
                        store.move(row, rule.state)
                        heapq.heappush(store.retained, (item.at, row.seq, row.version, row))
                    else:
                        store.delete(row)
                    if waiting:
                        pended |= store.release(waiting, item.at)
                elif rule.state == "dead":
                    row.dead_order = next(store.seq)
                    store.move(row, rule.state)
                    if row.flow_id is not None:
                        pended |= store.fell(row, item.at)
                else:
                    store.move(row, rule.state)
                    store.pend(row)
                    pended.add(row.queue)
                applied.append(True)
            for queue in pended:
                store.notify(queue)
        return applied

    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float
    ) -> list[bool | None]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        held: list[bool | None] = []
        with store.lock:
            for job_id, token in leases:
                row = store.jobs.get(job_id)
                if row is None or row.state != "inflight" or row.token != token:
                    cancelled = row is not None and row.state == "cancelled" and row.token == token
                    held.append(None if cancelled else False)
                    continue
                row.expires_at = expires_at
                row.version += 1
                heapq.heappush(store.leases, (expires_at, row.seq, row.version, row))
                held.append(True)
        return held

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        await anyio.lowlevel.checkpoint()
        store = self._store
        expired: list[StoredJob] = []
        dead: list[StoredJob] = []
        pruned = 0
        with store.lock:
            leases = store.leases
            pended: set[str] = set()
            while leases and leases[0][0] <= now:
                _, _, version, row = heapq.heappop(leases)
                if row.version != version:
                    continue
                row.token = None
                if row.attempts < row.max_attempts:
                    row.available_at = now
                    store.move(row, "pending")
                    store.pend(row)
                    pended.add(row.queue)
                    expired.append(row.snapshot())
                else:
                    row.last_error = expired_error
                    row.finished_at = now
                    row.dead_order = next(store.seq)
                    store.move(row, "dead")
                    dead.append(row.snapshot())
                    if row.flow_id is not None:
                        pended |= store.fell(row, now)
            cutoff = now - retain_done
            retained = store.retained
            while retained and retained[0][0] < cutoff:
                _, _, version, row = heapq.heappop(retained)
                if row.version == version:
                    store.delete(row)
                    pruned += 1
            for queue in pended:
                store.notify(queue)
            for records in store.records.values():
                for key in [k for k, r in records.items() if _expired(r, now)]:
                    del records[key]
        return SweepResult(repended=len(expired), expired=expired, dead=dead, pruned=pruned)

    async def prune_finished(self, *, now: float, retention: Retention) -> int:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            return store.prune_finished(retention, now)

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Return after ``timeout`` seconds **of the queue's clock**, or earlier when a job of
        ``queue`` becomes pending in this store (also through another backend sharing the
        namespace).  With a :class:`~blamequeue_testing.VirtualClock` the wait ends when a test
        advances the clock past it."""
        event = anyio.Event()
        waiters = self._store.waiters.setdefault(queue, set())
        waiters.add(event)

        async def time_out() -> None:
            await self.context.clock.sleep(timeout)
            event.set()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(time_out)
                await event.wait()
                tg.cancel_scope.cancel()
        finally:
            waiters.discard(event)

    # -- results and progress ----------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def watch_job(self, job_id: str) -> AsyncIterator[JobWatch]:
        """Settlements and progress events of ``job_id`` pushed by this store (also from
        backends sharing its namespace); time runs on the queue's clock."""
        watch = _MemoryWatch(self.context.clock)
        store = self._store
        with store.lock:
            store.watches.setdefault(job_id, set()).add(watch)
        try:
            yield watch
        finally:
            with store.lock:
                watches = store.watches.get(job_id)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del store.watches[job_id]

    async def publish_progress(self, job_id: str, event: str, *, now: float) -> None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            self._store.tell(job_id, event)

    # -- queue events (Queue.watch) --------------------------------------------------------
    async def publish_events(self, queue: str, events: Sequence[str], *, now: float) -> None:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            log = store.event_logs.get(queue)
            if log is None:
                log = store.event_logs[queue] = _EventLog()
            log.append(events)

    async def mark_watched(self, queue: str, *, until: float, now: float) -> None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            self._store.watched[queue] = max(until, self._store.watched.get(queue, until))

    async def is_watched(self, queue: str, *, now: float) -> bool:
        await anyio.lowlevel.checkpoint()
        return self._store.watched.get(queue, now) > now

    @contextlib.asynccontextmanager
    async def watch_queue(self, queue: str) -> AsyncIterator[QueueFeed]:
        """A cursor in the queue's log of this store (shared by a namespace); each publish
        wakes it.  The log keeps the last :data:`EVENT_LOG_CAP` events."""
        store = self._store
        with store.lock:
            log = store.event_logs.get(queue)
            if log is None:
                log = store.event_logs[queue] = _EventLog()
            feed = _MemoryFeed(store, log)
            log.waiters.add(feed.signal)
        try:
            yield feed
        finally:
            with store.lock:
                log.waiters.discard(feed.signal)

    # -- inspecting and operating ---------------------------------------------------------
    async def size(self, queue: str) -> int:
        await anyio.lowlevel.checkpoint()
        index = self._store.queues.get(queue)
        if index is None:
            return 0
        counts = index.counts
        return counts["pending"] + counts["inflight"] + counts["parked"]

    async def purge(self, queue: str) -> int:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            deleted = store.delete_in(queue, (*_LIVE, "done", "cancelled"))
            index = store.queues.get(queue)
            if index is not None:
                index.ready.clear()
                index.delayed.clear()
            return sum(1 for row in deleted if row.state in _LIVE)

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            index = store.queues.get(queue)
            if index is None:
                return []
            rows = [row for row in index.rows.values() if row.state == "dead"]
            rows.sort(key=lambda row: (row.finished_at or 0.0, row.dead_order), reverse=True)
            if limit is not None:
                rows = rows[: max(0, limit)]
            return [row.snapshot() for row in rows]

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            row = store.jobs.get(job_id)
            if row is None or row.state != "dead":
                return None
            before = row.snapshot()
            row.unique_key = row.unique_until = None  # back without its unique key
            row.attempts = 0
            row.available_at = now
            row.finished_at = None
            store.move(row, "pending")
            store.pend(row)
            store.notify(row.queue)
            return before

    async def dlq_size(self, queue: str) -> int:
        await anyio.lowlevel.checkpoint()
        index = self._store.queues.get(queue)
        return 0 if index is None else index.counts["dead"]

    async def dlq_purge(self, queue: str) -> int:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            return len(store.delete_in(queue, ("dead",)))

    async def cancel(self, job_id: str, *, now: float) -> CancelOutcome | None:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            row = store.jobs.get(job_id)
            if row is None:
                return None
            if row.state not in _LIVE:
                return CancelOutcome(job=row.snapshot(), cancelled=False)
            # The move bumps the version: the row's ready, delayed and lease heap entries go
            # stale, so no lease or sweep touches it again.  Its token stays, to fence the
            # old lease and let extend() tell that lease's worker.
            row.finished_at = now
            store.move(row, "cancelled")
            heapq.heappush(store.retained, (now, row.seq, row.version, row))
            if row.flow_id is not None:
                for queue in store.fell(row, now):
                    store.notify(queue)
            return CancelOutcome(job=row.snapshot(), cancelled=True)

    # -- job edits ---------------------------------------------------------------------------
    async def _edit(
        self, job_id: str, states: tuple[JobState, ...], apply: Callable[[_Row], bool]
    ) -> EditOutcome | None:
        """One edit in one critical section: ``apply`` changes the row when its state is one of
        ``states`` and answers whether it did."""
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            row = store.jobs.get(job_id)
            if row is None:
                return None
            was = row.state
            applied = was in states and apply(row)
            return EditOutcome(job=row.snapshot(), applied=applied, was=was)

    def _refile(self, row: _Row) -> None:
        """A pending row's due time or priority changed: its heap entries go stale (the
        version moves on) and it is filed again; waiting consumers are told."""
        row.version += 1
        self._store.pend(row)
        self._store.notify(row.queue)

    async def promote(self, job_id: str, *, now: float) -> EditOutcome | None:
        def apply(row: _Row) -> bool:
            if row.available_at <= now:
                return False
            row.available_at = now
            self._refile(row)
            return True

        return await self._edit(job_id, ("pending",), apply)

    async def change_delay(
        self, job_id: str, *, available_at: float, now: float
    ) -> EditOutcome | None:
        def apply(row: _Row) -> bool:
            row.available_at = available_at
            self._refile(row)
            return True

        return await self._edit(job_id, ("pending",), apply)

    async def change_priority(self, job_id: str, *, priority: int) -> EditOutcome | None:
        def apply(row: _Row) -> bool:
            row.priority = priority
            if row.state == "pending":
                self._refile(row)
            return True

        return await self._edit(job_id, ("pending", "parked"), apply)

    async def update_payload(
        self, job_id: str, payload: str, *, queue: str, flow_id: str | None, meta: str | None
    ) -> EditOutcome | None:
        def apply(row: _Row) -> bool:
            if (row.queue, row.flow_id, row.meta) != (queue, flow_id, meta):
                return False  # another job under this id: the payload was sealed for the old
            row.payload = payload
            return True

        return await self._edit(job_id, ("pending", "parked"), apply)

    async def rerun(self, job_id: str, *, now: float) -> EditOutcome | None:
        def apply(row: _Row) -> bool:
            if row.state == "done" and row.flow_id is not None:
                self._store.wait_again(row)
            row.unique_key = row.unique_until = None  # back without its unique key
            row.attempts = 0
            row.available_at = now
            row.finished_at = None
            row.result = None
            row.token = None
            self._store.move(row, "pending")  # the retention heap's entry goes stale
            self._store.pend(row)
            self._store.notify(row.queue)
            return True

        return await self._edit(job_id, ("done", "dead", "cancelled"), apply)

    # -- flows -----------------------------------------------------------------------------
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            members = self._store.flows.get(flow_id)
            if not members:
                return []
            rows = sorted(members.values(), key=lambda row: row.seq)
            return [row.snapshot() for row in rows]

    # -- inspection ----------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> StoredJob | None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            row = self._store.jobs.get(job_id)
            return None if row is None else row.snapshot()

    async def list_jobs(
        self, queue: str, *, state: JobState | None, limit: int, cursor: str | None
    ) -> StoredJobPage:
        await anyio.lowlevel.checkpoint()
        after = None if cursor is None else JobCursor.decode(cursor)
        with self._store.lock:
            index = self._store.queues.get(queue)
            if index is None:
                return StoredJobPage(jobs=[])
            rows = [
                row
                for row in index.rows.values()
                if (state is None or row.state == state)
                and (after is None or after.after(row.state, row.seq))
            ]
            # A scan per page: fine for a store that lives in a test process.
            rows.sort(key=lambda row: (JOB_STATES.index(row.state), row.seq))
            page = rows[:limit]
            more = len(rows) > limit
            return StoredJobPage(
                jobs=[row.snapshot() for row in page],
                next_cursor=JobCursor(state=page[-1].state, seq=page[-1].seq).encode()
                if more
                else None,
            )

    async def queue_counts(self) -> dict[str, dict[JobState, int]]:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            return {
                name: dict(index.counts)
                for name, index in self._store.queues.items()
                if any(index.counts.values())
            }

    # -- shared records ------------------------------------------------------------------------
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
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            record = store.live_record(kind, key, now)
            if record is not None and if_absent:
                return False
            if record is None:
                record = store.new_record(kind, key)
            record.value = bytes(value)
            record.expires_at = expires_at
            return True

    async def record_get(self, kind: str, key: str, *, now: float) -> Record | None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            record = self._store.live_record(kind, key, now)
            return None if record is None else record.snapshot(kind, key)

    async def record_get_many(
        self, kind: str, keys: Sequence[str], *, now: float
    ) -> list[Record | None]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            out: list[Record | None] = []
            for key in keys:
                record = store.live_record(kind, key, now)
                out.append(None if record is None else record.snapshot(kind, key))
            return out

    async def record_list(
        self, kind: str, *, now: float, prefix: str = "", limit: int | None = None
    ) -> list[Record]:
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            out: list[Record] = []
            for key in sorted(k for k in store.records.get(kind, {}) if k.startswith(prefix)):
                if limit is not None and len(out) >= limit:
                    break
                record = store.live_record(kind, key, now)
                if record is not None:
                    out.append(record.snapshot(kind, key))
            return out

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
        await anyio.lowlevel.checkpoint()
        store = self._store
        with store.lock:
            record = store.live_record(kind, key, now) or store.new_record(kind, key)
            if once is not None:
                if once in record.tokens:
                    return record.snapshot(kind, key), False
                record.tokens.add(once)
            counters = record.counters
            for name, delta in deltas.items():
                counters[name] = counters.get(name, 0) + delta
            if expires_at is not None:
                record.expires_at = expires_at
            return record.snapshot(kind, key), True

    async def record_delete(self, kind: str, key: str) -> bool:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            record = self._store.records.get(kind, {}).pop(key, None)
            return record is not None

    async def queue_stats(self, queue: str, *, now: float) -> QueueStats:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            index = self._store.queues.get(queue)
            rows = [] if index is None else [r for r in index.rows.values() if r.state == "pending"]
            due = [r.available_at for r in rows if r.available_at <= now]
            return QueueStats(delayed=len(rows) - len(due), oldest_due_at=min(due, default=None))

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            self._store.workers[worker.id] = worker

    async def worker_gone(self, worker_id: str) -> None:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            self._store.workers.pop(worker_id, None)

    async def list_workers(self, *, alive_since: float) -> list[WorkerRecord]:
        await anyio.lowlevel.checkpoint()
        with self._store.lock:
            workers = self._store.workers
            for worker_id in [w.id for w in workers.values() if w.heartbeat_at < alive_since]:
                del workers[worker_id]
            return sorted(workers.values(), key=lambda w: (w.queue, w.started_at, w.id))
