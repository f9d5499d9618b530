"""The ``local`` backend: :class:`LocalBackend`, jobs in one SQLite table.

Each transition of the contract is one statement from :mod:`blamequeue_local._statements`,
run through a :class:`Store`, whatever the batch size (settling a batch that both keeps and
deletes jobs takes two, and deleting takes one more, which marks flow jobs done first so the
jobs parked behind them are released; ``dlq_retry`` reads the dead job, then moves it with a
compare-and-set).
Errors from the store are mapped to :class:`~blamequeue.errors.QueueError` here, at the
boundary.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeVar, cast

import anyio
import anyio.to_thread

from blamequeue.abc import (
    JOB_STATES,
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
    StoreGuard,
    SweepResult,
    Uniqueness,
    Wakeup,
    WorkerRecord,
    check_settlements,
    compact_json,
    record_prefix_bound,
    storable_text,
)
from blamequeue.errors import BackendUnavailableError, BadArgumentError, QueueError
from blamequeue_local._aiosqlite_store import AiosqliteStore, is_aiosqlite_connection
from blamequeue_local._group_commit import GroupCommitStore
from blamequeue_local._options import LocalOptions, parse_options
from blamequeue_local._records_sql import RecordStatements
from blamequeue_local._sqlite_errors import map_store_error
from blamequeue_local._statements import (
    ADDED_COLUMNS,
    ENQUEUE_PARAMETERS,
    ENQUEUE_VALUES_MAX,
    MAX_PARAMETERS,
    WORKER_COLUMNS,
    Statements,
)
from blamequeue_local._store import Row, SQLiteStore, Store, connect
from blamequeue_local._wakeup import POLL_INTERVAL, FileSignature, Signature

__all__ = ["LocalBackend", "stored_job"]

T = TypeVar("T")

# Opening creates the schema; several processes starting at once may find the file busy
# beyond busy_timeout, so open() tries a few times before giving up.
_OPEN_ATTEMPTS: Final = 5
# A dead job moved by dlq_retry is re-read if it changed between our read and our write.
_DLQ_RETRY_ATTEMPTS: Final = 5
# enqueue_unique tries again when the key's holder finished between the insert and the read.
_UNIQUE_ATTEMPTS: Final = 5


# How JSON (compact_json, as json.dumps) writes a NUL character, which SQLite's JSON functions
# would cut text at.  Its absence proves a batch holds no NUL (a literal backslash-u0000 in the
# data is written with the backslash doubled, which this also matches: such a batch is refused
# needlessly, and only when it is too large for bound parameters).
_JSON_NUL: Final = "\\u0000"


# The worker registry's columns are named for the fields of WorkerRecord and typed like them
# (INTEGER, REAL, TEXT), so a registry row and a record map onto each other by name.
_WORKER_FIELDS: Final = tuple(WORKER_COLUMNS.split(", "))

# One padding row of Statements.enqueue_values (its NULL id makes the statement skip it).
_PADDING: Final[list[Any]] = [None] * ENQUEUE_PARAMETERS


_dumps = compact_json


def _depends_on(job: NewJob) -> str | None:
    return json.dumps(list(job.depends_on), separators=(",", ":")) if job.depends_on else None


def _bound_values(job: NewJob) -> tuple[Any, ...]:
    """The parameters of one job in :meth:`Statements.enqueue_values` (``ENQUEUE_COLUMNS``;
    the third is the job's entry: parked or pending, plus 2 when lifo)."""
    return (
        job.id,
        job.queue,
        (1 if job.parked else 0) + (2 if job.lifo else 0),
        job.payload,
        job.priority,
        job.max_attempts,
        job.created_at,
        job.available_at,
        job.classification,
        job.trace_id,
        job.meta,
        job.flow_id,
        _depends_on(job),
        job.group_key,
        _flow_rule(job),
    )


def _flow_rule(job: NewJob) -> str | None:
    """The ``flow_rule`` column: ``[on_dependency_failure, dependants_error]``, or NULL for a
    job that waits and has no dependant failing with it."""
    if job.on_dependency_failure == "wait" and job.dependants_error is None:
        return None
    return json.dumps([job.on_dependency_failure, job.dependants_error], separators=(",", ":"))


def stored_job(row: Row) -> StoredJob:
    """A :class:`StoredJob` from a row of :data:`~blamequeue_local._statements.COLUMNS`."""
    finished_at = row[14]
    depends_on = row[16]
    return StoredJob(
        id=row[0],
        queue=row[1],
        state=cast(JobState, row[2]),
        payload=row[3],
        priority=int(row[4]),
        attempts=int(row[5]),
        max_attempts=int(row[6]),
        # SQLite may hand back an integral REAL as an int (RETURNING does): normalise.
        created_at=float(row[7]),
        available_at=float(row[8]),
        classification=row[9],
        trace_id=row[10],
        last_error=row[11],
        meta=row[12],
        flow_id=row[13],
        depends_on=tuple(json.loads(depends_on)) if depends_on else (),
        finished_at=None if finished_at is None else float(finished_at),
        group_key=row[17],
        result=row[18],
    )


def _lease_order(row: Row) -> tuple[int, int, float, int]:
    """``LEASE_ORDER`` of a row of ``COLUMNS``: priority, then the lifo lane (latest due, then
    latest enqueued, first), then the others (earliest due, then earliest enqueued)."""
    lifo = bool(row[19])
    sign = -1 if lifo else 1
    return (-int(row[4]), -int(lifo), sign * float(row[8]), sign * int(row[15]))


def _leases(rows: list[Row], token: str, expires_at: float) -> list[Lease]:
    rows.sort(key=_lease_order)  # RETURNING order is unspecified
    return [Lease(job=stored_job(row), token=token, expires_at=expires_at) for row in rows]


class LocalBackend(
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
    Wakeup,
):
    """Jobs in a SQLite table: the embedded default backend (protocol ``local``).

    Options (all optional):

    * ``path``: the database file of the default store (``"./blamequeue.db"``).
    * ``table``: the jobs table (``"blamequeue_jobs"``); ``schema``: the SQLite schema holding
      it (``"main"``, ``"temp"``, or a database attached to a ``store`` connection).  Both are
      checked to be plain identifiers and quoted; nothing else is ever spliced into SQL.
    * ``durability``: ``"normal"`` (WAL + ``synchronous=NORMAL``: survives a process crash; an
      OS crash or power cut may lose the last commits) or ``"full"`` (fsync per commit).
    * ``busy_timeout``: seconds a statement waits for another connection's write lock (5.0)
      before failing with a retryable ``queue/backend-unavailable``.
    * ``store``: bring your own: a ``sqlite3.Connection`` (opened with
      ``check_same_thread=False``, e.g. by :func:`blamequeue_local.connect`), an
      ``aiosqlite.Connection`` (asyncio only), or any :class:`blamequeue_local.Store`.  Not
      combinable with ``path``, ``durability`` or ``busy_timeout``; never closed by the backend.

    The default store is a stdlib ``sqlite3`` connection driven from one anyio worker thread,
    so the backend runs on asyncio and trio alike.  Several processes may share the file:
    every transition is one atomic statement, and :meth:`wait_for_work` notices their commits.
    """

    protocol: ClassVar[str] = "local"

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._config: LocalOptions = parse_options(options)
        self._sql = Statements(self._config.table, self._config.schema)
        self._records_sql = RecordStatements(self._config.table, self._config.schema)
        where = self._config.path if self._config.path is not None else "bring-your-own store"
        self._where = f"local backend {context.name!r} ({where})"
        self._boundary = StoreGuard[Store](
            where=self._where, map_error=lambda exc: map_store_error(exc, where=self._where)
        )
        self._owned: SQLiteStore | None = None
        self._signature: FileSignature | None = None
        # Per queue: the database's file signature just before the last lease, so a commit
        # landing between an empty lease and the next wait_for_work is not missed.
        self._seen: dict[str, Signature] = {}
        self._finished_index = False  # made by prune_finished when first needed

    @property
    def store_path(self) -> str | None:
        path = self._config.path
        return None if path is None or path == ":memory:" else path

    @property
    def store(self) -> Store | None:
        """The store in use (``None`` until :meth:`open`)."""
        return self._boundary.handle

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        if self._boundary.is_open:
            return
        config = self._config
        owned: SQLiteStore | None = None
        store: Store
        if config.store is None:
            assert config.path is not None
            open_connection = functools.partial(
                connect,
                config.path,
                durability=config.durability,
                busy_timeout=config.busy_timeout,
            )
            connection = await self._retry_busy(
                lambda: self._boundary.call(anyio.to_thread.run_sync(open_connection))
            )
            # Its own connection: concurrent statements share a transaction (group commit).
            store = owned = GroupCommitStore(connection)
        elif isinstance(config.store, sqlite3.Connection):
            store = SQLiteStore(config.store)
        elif is_aiosqlite_connection(config.store):
            store = AiosqliteStore(config.store)
        else:
            store = cast(Store, config.store)
        try:
            for number, statement in enumerate((*self._sql.schema, *self._records_sql.schema)):

                async def create(statement: str = statement) -> int:
                    return await self._boundary.call(store.execute(statement, ()))

                await self._retry_busy(create)
                if number == 0:  # the CREATE TABLE: bring an older table up to date
                    await self._retry_busy(lambda: self._add_missing_columns(store))
                    for drop in self._sql.drop_replaced:

                        async def replace(drop: str = drop) -> int:
                            return await self._boundary.call(store.execute(drop, ()))

                        await self._retry_busy(replace)
            self._signature = await self._find_signature(store)
        except BaseException:
            if owned is not None:
                await owned.aclose()
            raise
        self._boundary.opened(store)
        self._owned = owned

    async def close(self) -> None:
        self._boundary.closed()
        owned, self._owned = self._owned, None
        self._seen.clear()
        if owned is not None:
            await owned.aclose()

    async def _add_missing_columns(self, store: Store) -> None:
        """Bring a table made by an earlier version up to date (``ALTER TABLE ADD COLUMN``)."""
        rows = await self._boundary.call(store.execute_all(self._sql.table_info, ()))
        present = {str(row[1]) for row in rows}
        for column in ADDED_COLUMNS:
            if column in present:
                continue
            try:
                await self._boundary.call(store.execute(self._sql.add_column(column), ()))
            except QueueError:
                # Another process starting at the same time may have added it first.
                rows = await self._boundary.call(store.execute_all(self._sql.table_info, ()))
                if column not in {str(row[1]) for row in rows}:
                    raise

    async def _find_signature(self, store: Store) -> FileSignature | None:
        """The file to watch for other processes' commits, if the table lives in one."""
        if self._config.store is None:
            path = self._config.path
            if path is None or path == ":memory:":
                return None
            return FileSignature(path)
        schema = (self._config.schema or "main").lower()
        try:
            rows = await store.execute_all("PRAGMA database_list", ())
        except Exception:
            return None  # a store that cannot say where it lives just gets polled
        for row in rows:
            if str(row[1]).lower() == schema and row[2]:
                return FileSignature(str(row[2]))
        return None

    async def _retry_busy(self, step: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(_OPEN_ATTEMPTS):
            try:
                return await step()
            except BackendUnavailableError as exc:
                if not exc.retryable or attempt == _OPEN_ATTEMPTS - 1:
                    raise
            await anyio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the store boundary ----------------------------------------------------------------
    async def _all(self, sql: str, params: Sequence[Any]) -> list[Row]:
        return await self._boundary.call(self._boundary.require().execute_all(sql, params))

    async def _one(self, sql: str, params: Sequence[Any]) -> Row | None:
        return await self._boundary.call(self._boundary.require().execute_one(sql, params))

    async def _execute(self, sql: str, params: Sequence[Any]) -> int:
        return await self._boundary.call(self._boundary.require().execute(sql, params))

    async def _count(self, sql: str, params: Sequence[Any]) -> int:
        row = await self._one(sql, params)
        return 0 if row is None else int(row[0])

    # -- producing -------------------------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        count = len(jobs)
        if not count:
            return
        if count <= ENQUEUE_VALUES_MAX:
            bucket = 1 << (count - 1).bit_length()
            params: list[Any] = [value for job in jobs for value in _bound_values(job)]
            params += _PADDING * (bucket - count)
            await self._execute(self._sql.enqueue_values(bucket), params)
            return
        encoded = _dumps([_bound_values(job) for job in jobs])
        if _JSON_NUL in encoded:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{self._where}: jobs whose text holds NUL characters must come in batches of "
                f"at most {ENQUEUE_VALUES_MAX}, got {count}: split the batch",
            )
        await self._execute(self._sql.enqueue, (encoded,))

    async def enqueue_absent(self, jobs: Sequence[NewJob]) -> list[bool]:
        count = len(jobs)
        if not count:
            return []
        if count > ENQUEUE_VALUES_MAX:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{self._where}: at most {ENQUEUE_VALUES_MAX} jobs with chosen ids at once, got "
                f"{count}: split the batch",
            )
        bucket = 1 << (count - 1).bit_length()
        params: list[Any] = [value for job in jobs for value in _bound_values(job)]
        params += _PADDING * (bucket - count)
        rows = await self._boundary.call(
            self._boundary.require().execute_all(self._sql.enqueue_absent(bucket), params)
        )
        # A later job with the id of an earlier one conflicts with it: only the first is new.
        new = {str(row[0]) for row in rows}
        answers: list[bool] = []
        for job in jobs:
            answers.append(job.id in new)
            new.discard(job.id)
        return answers

    async def enqueue_unique(
        self, job: NewJob, *, unique_key: str, hold_until: float | None, now: float
    ) -> str:
        insert = (*_bound_values(job), unique_key, hold_until, job.queue, now)
        for _ in range(_UNIQUE_ATTEMPTS):
            if await self._one(self._sql.enqueue_unique, insert) is not None:
                return job.id
            # A job holds the key.  It may leave the live states before we read its id: then
            # the key is free and the insert is tried again.
            holder = await self._one(self._sql.unique_holder, (job.queue, unique_key, now))
            if holder is not None:
                return str(holder[0])
        raise BackendUnavailableError(
            f"{self._where}: the holder of unique key {unique_key[:40]!r} kept changing while "
            f"enqueueing; try again"
        )

    # -- consuming -------------------------------------------------------------------------
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        store = self._leasing(queue)
        if limit <= 0:
            return []
        # One token per call: the fence checks (id, token) pairs, and a job is leased again
        # only by a later call with another token.
        token = secrets.token_hex(16)
        expires_at = now + lease_seconds
        rows = await self._boundary.call(
            store.execute_all(self._sql.lease, (token, expires_at, queue, now, limit))
        )
        return _leases(rows, token, expires_at)

    def _leasing(self, queue: str) -> Store:
        """The store, once the file signature this lease of ``queue`` starts from is noted (so
        a commit landing between an empty lease and the next wait_for_work is not missed)."""
        store = self._boundary.require()
        if self._signature is not None:
            self._seen[queue] = self._signature.read()
        return store

    async def lease_limited(
        self, queue: str, *, limit: int, now: float, lease_seconds: float, limits: LeaseLimits
    ) -> list[Lease]:
        """:meth:`lease` under fleet-wide limits: one refill statement (safe on its own), then
        one lease statement that spends the tokens (through a trigger) and counts each group's
        inflight jobs as it takes jobs (see ``Statements.lease_limited``)."""
        store = self._leasing(queue)
        if limit <= 0:
            return []
        token = secrets.token_hex(16)
        rated = limits.rate_max is not None and limits.rate_per_seconds is not None
        if rated:
            await self._boundary.call(
                store.execute(
                    self._sql.refill, (queue, now, limits.rate_max, limits.rate_per_seconds)
                )
            )
            token = "r:" + token  # the bucket trigger takes a token for these leases only
        expires_at = now + lease_seconds
        params = (
            token,
            expires_at,
            queue,
            now,
            limit,
            limits.group_concurrency,
            1 if rated else None,
        )
        rows = await self._boundary.call(store.execute_all(self._sql.lease_limited, params))
        return _leases(rows, token, expires_at)

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        if not settlements:
            return []
        updates: list[list[Any]] = []
        bound: list[list[Any]] = []
        deletes: list[list[Any]] = []
        for item, first in zip(settlements, check_settlements(settlements), strict=True):
            if not first:
                continue  # a repeated settlement is stale: completion applies once
            if item.outcome == "done" and not item.keep:
                deletes.append([item.job_id, item.token, item.at])
                continue
            error = None if item.error is None else storable_text(item.error)
            update = [item.job_id, item.token, item.outcome, item.at, error, item.result]
            (bound if error is not None and "\x00" in error else updates).append(update)

        applied: set[tuple[str, str]] = set()
        if updates:
            rows = await self._all(self._sql.settle, (_dumps(updates),))
            applied.update((row[0], row[1]) for row in rows)
        # Rare: errors holding NUL characters, bound as parameters (each settlement is atomic
        # on its own, so these may take several statements).
        per_statement = MAX_PARAMETERS // 6
        for start in range(0, len(bound), per_statement):
            chunk = bound[start : start + per_statement]
            params = [value for update in chunk for value in update]
            rows = await self._all(self._sql.settle_bound(len(chunk)), params)
            applied.update((row[0], row[1]) for row in rows)
        if deletes:
            encoded = _dumps(deletes)
            # Flow jobs among them are marked done first: that releases their dependants.
            rows = await self._all(self._sql.settle_done_flow_jobs, (encoded,))
            applied.update((row[0], row[1]) for row in rows)
            rows = await self._all(self._sql.settle_delete, (encoded,))
            applied.update((row[0], row[1]) for row in rows)

        results: list[bool] = []
        for item in settlements:
            key = (item.job_id, item.token)
            results.append(key in applied)
            applied.discard(key)
        return results

    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float
    ) -> list[bool | None]:
        if not leases:
            return []
        pairs = [[job_id, token] for job_id, token in leases]
        rows = await self._all(self._sql.extend, (expires_at, _dumps(pairs)))
        held: dict[tuple[str, str], bool | None] = {
            (row[0], row[1]): True if row[2] == "inflight" else None for row in rows
        }
        return [held.get((job_id, token), False) for job_id, token in leases]

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        rows = await self._all(self._sql.sweep_expired, (now, expired_error))
        jobs = [stored_job(row) for row in rows]
        dead = [job for job in jobs if job.state == "dead"]
        expired = [job for job in jobs if job.state != "dead"]
        pruned = await self._execute(self._sql.prune_done, (now - retain_done,))
        pruned += await self._execute(self._sql.prune_cancelled, (now - retain_done,))
        await self._execute(self._records_sql.prune, (now,))
        return SweepResult(repended=len(expired), expired=expired, dead=dead, pruned=pruned)

    async def prune_finished(self, *, now: float, retention: Retention) -> int:
        """The limits beyond ``retain_done``, one statement per queue and limit.  The index
        that orders a queue's done and cancelled jobs by ``finished_at`` is made the first
        time ``retain_done_count`` is used on this database (and kept): without the option,
        completing a job writes no entry to it."""
        sql = self._sql
        pruned = 0
        dead_cutoff = retention.dead_cutoff(now)
        if dead_cutoff is not None or retention.dead_count is not None:
            for (queue,) in await self._all(sql.dead_queues, ()):
                if dead_cutoff is not None:
                    pruned += await self._execute(sql.prune_dead, (queue, dead_cutoff))
                if retention.dead_count is not None:
                    pruned += await self._execute(sql.trim_dead, (queue, retention.dead_count))
        if retention.done_count is not None:
            if not self._finished_index:
                await self._execute(sql.finished_index, ())
                self._finished_index = True
            for (queue,) in await self._all(sql.finished_queues, ()):
                pruned += await self._execute(sql.trim_finished, (queue, retention.done_count))
        return pruned

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        signature = self._signature
        if signature is None or not self._boundary.is_open:
            await anyio.sleep(max(0.0, timeout))
            return
        baseline = self._seen.get(queue)
        if baseline is None:
            baseline = signature.read()
        with anyio.move_on_after(max(0.0, timeout)):
            while True:
                current = signature.read()
                if current != baseline:
                    # Remember it, so a second wait before the next lease does not spin.
                    self._seen[queue] = current
                    return
                await anyio.sleep(POLL_INTERVAL)

    # -- results and progress ----------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def watch_job(self, job_id: str) -> AsyncIterator[JobWatch]:
        """Wakes on every commit to the database file (the WAL watch of :meth:`wait_for_work`),
        by this process or another, and reads the job's new progress events from the events
        table; a store with no file to watch is looked at every 20 ms."""
        after = await self._count(self._sql.event_last, ())
        yield _LocalWatch(self, job_id, after)

    async def publish_progress(self, job_id: str, event: str, *, now: float) -> None:
        await self._execute(self._sql.event_publish, (job_id, now, event))

    async def _events_after(self, job_id: str, seq: int) -> list[Row]:
        return await self._all(self._sql.event_read, (job_id, seq))

    async def _commit_seen(self, baseline: Signature) -> Signature:
        """Return the file signature once it differs from ``baseline`` (real time, polled
        every 20 ms, like :meth:`wait_for_work`)."""
        signature = self._signature
        assert signature is not None
        while True:
            current = signature.read()
            if current != baseline:
                return current
            await anyio.sleep(POLL_INTERVAL)

    # -- queue events (Queue.watch) --------------------------------------------------------
    async def publish_events(self, queue: str, events: Sequence[str], *, now: float) -> None:
        await self._execute(self._sql.queue_events_publish, (queue, _dumps(list(events))))

    async def mark_watched(self, queue: str, *, until: float, now: float) -> None:
        await self._execute(self._sql.watch_mark, (queue, until))

    async def is_watched(self, queue: str, *, now: float) -> bool:
        return await self._one(self._sql.watched, (queue, now)) is not None

    @contextlib.asynccontextmanager
    async def watch_queue(self, queue: str) -> AsyncIterator[QueueFeed]:
        """A cursor (the last ``seq`` read) in the queue's events table, woken by the WAL
        watch of :meth:`wait_for_work` (every commit to the file, by any process) and reading
        at most every :data:`_FEED_READ_GAP` seconds; a store with no file to watch is read
        every :data:`_FEED_READ_GAP` seconds."""
        after = await self._count(self._sql.queue_events_last, ())
        yield _LocalFeed(self, queue, after)

    async def _queue_events_after(self, queue: str, seq: int) -> list[Row]:
        return await self._all(self._sql.queue_events_read, (queue, seq, _FEED_BATCH))

    # -- inspecting and operating ---------------------------------------------------------
    async def size(self, queue: str) -> int:
        return await self._count(self._sql.size, (queue,))

    async def next_due(self, queue: str, *, now: float) -> float | None:
        row = await self._one(self._sql.next_due, (queue,))
        return None if row is None or row[0] is None else float(row[0])

    async def purge(self, queue: str) -> int:
        rows = await self._all(self._sql.purge, (queue,))
        return sum(1 for row in rows if row[0])

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        rows = await self._all(self._sql.dlq_list, (queue, -1 if limit is None else max(0, limit)))
        return [stored_job(row) for row in rows]

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        # Read the dead job, then move it with a compare-and-set on what it was: the write is
        # still one atomic statement, and the job returned is exactly the one moved.
        for _ in range(_DLQ_RETRY_ATTEMPTS):
            row = await self._one(self._sql.dlq_get, (job_id,))
            if row is None:
                return None
            moved = await self._execute(
                self._sql.dlq_retry, (now, row[15], row[5], row[14], row[11])
            )
            if moved:
                return stored_job(row)
        raise BackendUnavailableError(
            f"{self._where}: dead job {job_id!r} kept changing while being retried; try again"
        )

    async def cancel(self, job_id: str, *, now: float) -> CancelOutcome | None:
        row = await self._one(self._sql.cancel, (job_id, now))
        if row is not None:
            return CancelOutcome(job=stored_job(row), cancelled=True)
        # Nothing live to cancel: say whether the job exists (a read, deciding nothing).
        found = await self.get_job(job_id)
        return None if found is None else CancelOutcome(job=found, cancelled=False)

    # -- job edits ---------------------------------------------------------------------------
    async def _edit(self, sql: str, params: Sequence[Any], job_id: str) -> EditOutcome | None:
        """One conditional statement; when it changed nothing, say whether the job exists (a
        read, deciding nothing)."""
        row = await self._one(sql, params)
        if row is not None:
            # Each edit applies to one state only or keeps it, so the state is the one it had.
            job = stored_job(row)
            return EditOutcome(job=job, applied=True, was=job.state)
        found = await self.get_job(job_id)
        return None if found is None else EditOutcome(job=found, applied=False, was=found.state)

    async def promote(self, job_id: str, *, now: float) -> EditOutcome | None:
        return await self._edit(self._sql.promote, (job_id, now), job_id)

    async def change_delay(
        self, job_id: str, *, available_at: float, now: float
    ) -> EditOutcome | None:
        return await self._edit(self._sql.change_delay, (job_id, available_at), job_id)

    async def change_priority(self, job_id: str, *, priority: int) -> EditOutcome | None:
        return await self._edit(self._sql.change_priority, (job_id, priority), job_id)

    async def update_payload(
        self, job_id: str, payload: str, *, queue: str, flow_id: str | None, meta: str | None
    ) -> EditOutcome | None:
        params = (job_id, payload, queue, flow_id, meta)
        return await self._edit(self._sql.update_payload, params, job_id)

    async def rerun(self, job_id: str, *, now: float) -> EditOutcome | None:
        # Read the job, then move it with a compare-and-set on its state and finish time: the
        # write is still one atomic statement, and the state it left is exactly the one read.
        for _ in range(_DLQ_RETRY_ATTEMPTS):
            read = await self._one(self._sql.get_job, (job_id,))
            if read is None:
                return None
            found = stored_job(read)
            if found.state not in ("done", "dead", "cancelled"):
                return EditOutcome(job=found, applied=False, was=found.state)
            row = await self._one(self._sql.rerun, (now, read[15], read[2], read[14]))
            if row is not None:
                return EditOutcome(job=stored_job(row), applied=True, was=found.state)
        raise BackendUnavailableError(
            f"{self._where}: job {job_id!r} kept changing while being rerun; try again"
        )

    # -- flows -----------------------------------------------------------------------------
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        rows = await self._all(self._sql.flow_jobs, (flow_id,))
        return [stored_job(row) for row in rows]

    async def dlq_size(self, queue: str) -> int:
        return await self._count(self._sql.dlq_size, (queue,))

    async def dlq_purge(self, queue: str) -> int:
        return await self._execute(self._sql.dlq_purge, (queue,))

    # -- inspection ----------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> StoredJob | None:
        row = await self._one(self._sql.get_job, (job_id,))
        return None if row is None else stored_job(row)

    async def list_jobs(
        self, queue: str, *, state: JobState | None, limit: int, cursor: str | None
    ) -> StoredJobPage:
        after = None if cursor is None else JobCursor.decode(cursor)
        states = JOB_STATES if state is None else (state,)
        rows: list[Row] = []
        # One indexed statement per state, in listing order, until the page (plus one row, to
        # know whether another page follows) is full.
        for name in states:
            if after is not None and JOB_STATES.index(name) < JOB_STATES.index(after.state):
                continue
            seq = after.seq if after is not None and name == after.state else 0
            rows += await self._all(self._sql.list_jobs, (queue, name, seq, limit + 1 - len(rows)))
            if len(rows) > limit:
                break
        page = [stored_job(row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = JobCursor(state=page[-1].state, seq=int(last[15])).encode()
        return StoredJobPage(jobs=page, next_cursor=next_cursor)

    async def queue_counts(self) -> dict[str, dict[JobState, int]]:
        counts: dict[str, dict[JobState, int]] = {}
        for queue, state, count in await self._all(self._sql.queue_counts, ()):
            if state in JOB_STATES:
                per_state = counts.setdefault(str(queue), dict.fromkeys(JOB_STATES, 0))
                per_state[cast(JobState, state)] = int(count)
        return counts

    async def queue_stats(self, queue: str, *, now: float) -> QueueStats:
        row = await self._one(self._sql.queue_stats, (queue, now))
        delayed, oldest = (0, None) if row is None else row
        return QueueStats(
            delayed=int(delayed or 0), oldest_due_at=None if oldest is None else float(oldest)
        )

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
        sql = self._records_sql.put_if_absent if if_absent else self._records_sql.put
        return await self._execute(sql, (kind, key, bytes(value), now, expires_at)) > 0

    async def record_get(self, kind: str, key: str, *, now: float) -> Record | None:
        row = await self._one(self._records_sql.get, (kind, key, now))
        return None if row is None else _record(kind, row)

    async def record_get_many(
        self, kind: str, keys: Sequence[str], *, now: float
    ) -> list[Record | None]:
        rows = await self._all(self._records_sql.get_many, (kind, json.dumps(list(keys)), now))
        found = {str(row[0]): _record(kind, row) for row in rows}
        return [found.get(key) for key in keys]

    async def record_list(
        self, kind: str, *, now: float, prefix: str = "", limit: int | None = None
    ) -> list[Record]:
        params = (kind, prefix, record_prefix_bound(prefix), now, -1 if limit is None else limit)
        return [_record(kind, row) for row in await self._all(self._records_sql.list, params)]

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
        params = (kind, key, json.dumps(dict(deltas)), now, expires_at, once)
        row = await self._one(self._records_sql.add, params)
        if row is not None:
            return _record(kind, row), True
        # The token had been applied: nothing changed, and the record is live (an expired
        # one would have been recreated), unless another process deleted it since.
        current = await self.record_get(kind, key, now=now)
        if current is None:
            current = Record(kind=kind, key=key, value=None, counters={}, expires_at=None)
        return current, False

    async def record_delete(self, kind: str, key: str) -> bool:
        return await self._execute(self._records_sql.delete, (kind, key)) > 0

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        values = tuple(getattr(worker, field) for field in _WORKER_FIELDS)
        await self._execute(self._sql.worker_heartbeat, values)

    async def worker_gone(self, worker_id: str) -> None:
        await self._execute(self._sql.worker_gone, (worker_id,))

    async def list_workers(self, *, alive_since: float) -> list[WorkerRecord]:
        await self._execute(self._sql.workers_prune, (alive_since,))
        rows = await self._all(self._sql.workers_list, (alive_since,))
        return [WorkerRecord(**dict(zip(_WORKER_FIELDS, row, strict=True))) for row in rows]


def _record(kind: str, row: Row) -> Record:
    value = row[1]
    return Record(
        kind=kind,
        key=str(row[0]),
        value=None if value is None else bytes(value),
        counters=json.loads(row[2]),
        expires_at=None if row[3] is None else float(row[3]),
    )


#: The most rows a queue watch reads at once, and the least real time between two reads.
_FEED_BATCH: Final = 1000
_FEED_READ_GAP: Final = 0.05


class _LocalFeed(QueueFeed):
    """One queue watch on the ``local`` backend: a commit to the file wakes it, then one
    statement reads what came after its cursor (and whether the trim passed it)."""

    def __init__(self, backend: LocalBackend, queue: str, after: int) -> None:
        self._backend = backend
        self._queue = queue
        self._after = after
        self._read_at = -float("inf")

    async def read(self, timeout: float) -> EventRead:
        signature = self._backend._signature
        baseline = None if signature is None else signature.read()
        found = await self._read()
        if found.events or found.missed or timeout <= 0:
            return found
        with anyio.move_on_after(timeout):
            if baseline is None:
                await anyio.sleep(timeout)
            else:
                await self._backend._commit_seen(baseline)
            # Not faster than _FEED_READ_GAP, however often the file changes.
            await anyio.sleep(max(0.0, self._read_at + _FEED_READ_GAP - anyio.current_time()))
            return await self._read()
        return EventRead()

    async def _read(self) -> EventRead:
        self._read_at = anyio.current_time()
        rows = await self._backend._queue_events_after(self._queue, self._after)
        missed = False
        events: list[str] = []
        for seq, event in rows:
            if int(seq) < 0:
                missed = True
                self._after = max(self._after, int(event))  # what is left comes after it
                continue
            self._after = int(seq)
            events.append(str(event))
        return EventRead(events=events, missed=missed)


class _LocalWatch(JobWatch):
    """One job's watch on the ``local`` backend: new commits wake it; its progress events
    come from the events table, each read once (by ``seq``)."""

    def __init__(self, backend: LocalBackend, job_id: str, after: int) -> None:
        super().__init__(backend.context.clock)
        self._backend = backend
        self._job_id = job_id
        self._after = after
        self._events: deque[str] = deque()
        self._look = False  # a None is owed once the events read are out
        signature = backend._signature
        self._baseline: Signature | None = None if signature is None else signature.read()

    async def next_event(self, timeout: float) -> str | None:
        if timeout <= 0:
            # The core saw the job end: what was published before, read now, no waiting.
            if not self._events:
                await self._read()
            return self._events.popleft() if self._events else None
        if not self._events and not self._look:
            baseline = self._baseline
            if baseline is None:
                # No file to watch (an in-memory or path-less store): look when the core's
                # poll says so.
                await self.clock.sleep(timeout)
            else:
                seen = await self.first_of(timeout, lambda: self._backend._commit_seen(baseline))
                if seen is None:
                    return None  # the time passed with no commit: nothing new
                self._baseline = seen
            await self._read()
            # The same commits may have settled the job: the core looks once the events are out.
            self._look = True
        if self._events:
            return self._events.popleft()
        self._look = False
        return None

    async def _read(self) -> None:
        for seq, event in await self._backend._events_after(self._job_id, self._after):
            self._after = int(seq)
            self._events.append(str(event))
