"""Protocol ``jsonfile``: every job of every queue in one JSON file.

The point of this backend is to be read.  Its store is as plain as a store gets, so what is
left is the shape every blamequeue backend has:

* the constructor only validates options (no I/O);
* each method of the contract is **one transaction**: lock the file, load it, apply a plain
  function to the loaded state, write it back atomically (temporary file + ``os.replace``);
* the lock is ``fcntl.flock`` on a lock file beside the store, so transitions are atomic
  across tasks, threads *and* processes (two workers on one file never lease the same job);
* blocking file work runs in an anyio worker thread, so the backend runs on asyncio and trio;
* time comes only from the ``now`` / ``at`` values the core passes in;
* foreign errors (``OSError``, a corrupt file) become ``QueueError`` at this boundary.

Every transition rewrites the whole file, so it is meant for a few thousand jobs, not a
production backlog.  POSIX only (``fcntl``).

Options: ``path`` (the JSON file, default ``./blamequeue-jobs.json``) and ``fsync`` (default
``True``: the file and its directory are flushed to disk before a transition returns).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.to_thread
from blamequeue.abc import (
    Backend,
    BackendContext,
    DeadLetters,
    Flows,
    Lease,
    NewJob,
    OptionReader,
    Settlement,
    StoredJob,
    SweepResult,
    Wakeup,
    check_settlements,
    outcome_rule,
)
from blamequeue.errors import BackendUnavailableError, BadArgumentError

__all__ = ["JsonFileBackend", "JsonFileStore"]

T = TypeVar("T")

# The loaded file: {"next_seq": int, "jobs": {job_id: row}}, a row being a dict of the
# StoredJob fields plus "seq" (enqueue order), "token" and "expires_at" (the lease) and
# "dead_seq" (when it became dead, the tie-breaker of dlq_list).
State = dict[str, Any]
Row = dict[str, Any]

_LIVE = frozenset({"pending", "inflight", "parked"})
_WAKE_POLL = 0.05  # seconds between looks at the file while a consumer idles


def _snapshot(row: Row) -> StoredJob:
    return StoredJob(
        id=row["id"],
        queue=row["queue"],
        state=row["state"],
        payload=row["payload"],
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        created_at=row["created_at"],
        available_at=row["available_at"],
        classification=row["classification"],
        trace_id=row["trace_id"],
        last_error=row["last_error"],
        meta=row["meta"],
        flow_id=row["flow_id"],
        depends_on=tuple(row["depends_on"]),
        finished_at=row["finished_at"],
    )


def _owned(state: State, job_id: str, token: str) -> Row | None:
    """The row of ``job_id`` if ``token`` holds its lease (the fence), else None."""
    row: Row | None = state["jobs"].get(job_id)
    if row is None or row["state"] != "inflight" or row["token"] != token:
        return None
    return row


def _of_queue(state: State, queue: str, *states: str) -> list[Row]:
    return [r for r in state["jobs"].values() if r["queue"] == queue and r["state"] in states]


# -- the transitions: plain functions of the loaded state ---------------------------------------
def _enqueue(state: State, jobs: Sequence[NewJob]) -> None:
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids) or any(job_id in state["jobs"] for job_id in ids):
        # Checked before anything changes: all jobs or none.
        raise BadArgumentError("queue/bad-argument", "a job with one of these ids already exists")
    for job in jobs:
        state["jobs"][job.id] = {
            "id": job.id,
            "queue": job.queue,
            "state": "parked" if job.parked else "pending",
            "payload": job.payload,
            "priority": job.priority,
            "attempts": 0,
            "max_attempts": job.max_attempts,
            "created_at": job.created_at,
            "available_at": job.available_at,
            "classification": job.classification,
            "trace_id": job.trace_id,
            "last_error": None,
            "meta": job.meta,
            "flow_id": job.flow_id,
            "depends_on": list(job.depends_on),
            "finished_at": None,
            "seq": state["next_seq"],
            "token": None,
            "expires_at": None,
            "dead_seq": None,
        }
        state["next_seq"] += 1


# --8<-- [start:lease]
def _lease(state: State, queue: str, limit: int, now: float, lease_seconds: float) -> list[Lease]:
    due = [r for r in _of_queue(state, queue, "pending") if r["available_at"] <= now]
    due.sort(key=lambda r: (-r["priority"], r["available_at"], r["seq"]))
    leases = []
    for row in due[: max(0, limit)]:
        row["state"] = "inflight"
        row["attempts"] += 1
        row["token"] = secrets.token_hex(16)
        row["expires_at"] = now + lease_seconds
        leases.append(Lease(job=_snapshot(row), token=row["token"], expires_at=row["expires_at"]))
    return leases


# --8<-- [end:lease]


# --8<-- [start:settle]
def _release_dependants(state: State, done_id: str, at: float) -> None:
    """Flows: a job is done (kept or deleted), so each parked job whose every dependency is now
    done or gone becomes pending, due at ``at`` (in the same transaction as the settlement)."""
    jobs = state["jobs"]
    for row in jobs.values():
        if row["state"] != "parked" or done_id not in row["depends_on"]:
            continue
        if all(dep not in jobs or jobs[dep]["state"] == "done" for dep in row["depends_on"]):
            row["state"] = "pending"
            row["available_at"] = at


def _settle(state: State, settlements: Sequence[Settlement]) -> list[bool]:
    check_settlements(settlements)  # an unknown outcome refuses the batch before any change
    applied = []
    for item in settlements:
        row = _owned(state, item.job_id, item.token)
        if row is None:
            applied.append(False)  # stale: the lease was lost; nothing changes
            continue
        row["token"] = row["expires_at"] = None
        rule = outcome_rule(item.outcome)  # what the outcome does (SETTLEMENT_OUTCOMES)
        row["state"] = rule.state
        row["finished_at" if rule.finishes else "available_at"] = item.at
        if rule.gives_back_attempt:  # release: a worker shut down mid-attempt
            row["attempts"] = max(0, row["attempts"] - 1)
        if rule.sets_error or item.error is not None:
            row["last_error"] = item.error
        if item.outcome == "done":
            if not item.keep:
                del state["jobs"][item.job_id]
            _release_dependants(state, item.job_id, item.at)
        elif rule.state == "dead":
            row["dead_seq"] = state["next_seq"]  # the tie-breaker of dlq_list
            state["next_seq"] += 1
        applied.append(True)
    return applied


# --8<-- [end:settle]


def _extend(state: State, leases: Sequence[tuple[str, str]], expires_at: float) -> list[bool]:
    held = []
    for job_id, token in leases:
        row = _owned(state, job_id, token)
        if row is not None:
            row["expires_at"] = expires_at
        held.append(row is not None)
    return held


# --8<-- [start:sweep]
def _sweep(state: State, now: float, retain_done: float, expired_error: str) -> SweepResult:
    expired: list[StoredJob] = []
    dead: list[StoredJob] = []
    jobs = state["jobs"]
    for row in jobs.values():
        if row["state"] != "inflight" or row["expires_at"] > now:
            continue
        row["token"] = row["expires_at"] = None
        if row["attempts"] < row["max_attempts"]:
            row.update(state="pending", available_at=now)
            expired.append(_snapshot(row))
        else:  # a job that keeps killing its workers must not loop for ever
            row.update(state="dead", last_error=expired_error, finished_at=now)
            row["dead_seq"] = state["next_seq"]
            state["next_seq"] += 1
            dead.append(_snapshot(row))
    cutoff = now - retain_done
    old = [i for i, r in jobs.items() if r["state"] == "done" and r["finished_at"] < cutoff]
    for job_id in old:
        del jobs[job_id]
    return SweepResult(repended=len(expired), expired=expired, dead=dead, pruned=len(old))


# --8<-- [end:sweep]


def _purge(state: State, queue: str) -> int:
    doomed = _of_queue(state, queue, *_LIVE, "done")
    for row in doomed:
        del state["jobs"][row["id"]]
    return sum(1 for row in doomed if row["state"] in _LIVE)


def _dlq_list(state: State, queue: str, limit: int | None) -> list[StoredJob]:
    rows = _of_queue(state, queue, "dead")
    rows.sort(key=lambda r: (r["finished_at"], r["dead_seq"]), reverse=True)  # latest first
    if limit is not None:
        rows = rows[: max(0, limit)]
    return [_snapshot(row) for row in rows]


def _dlq_retry(state: State, job_id: str, now: float) -> StoredJob | None:
    row = state["jobs"].get(job_id)
    if row is None or row["state"] != "dead":
        return None
    before = _snapshot(row)
    row.update(state="pending", attempts=0, available_at=now, finished_at=None, dead_seq=None)
    return before


def _dlq_purge(state: State, queue: str) -> int:
    dead = _of_queue(state, queue, "dead")
    for row in dead:
        del state["jobs"][row["id"]]
    return len(dead)


def _flow_jobs(state: State, flow_id: str) -> list[StoredJob]:
    rows = [r for r in state["jobs"].values() if r["flow_id"] == flow_id]
    return [_snapshot(row) for row in sorted(rows, key=lambda r: r["seq"])]


# --8<-- [start:required-class]
class JsonFileStore(Backend):
    """The ``jsonfile-basic`` protocol: the required part of the contract only.

    Jobs in one JSON file, locked with ``flock``: ``{"protocol": "jsonfile-basic", "path":
    "jobs.json"}``.  Several processes may share the file.  Durable (it survives restarts), so
    with no seal key configured the queue keeps one in ``<path>.key`` beside it
    (:attr:`store_path`).  Enough for enqueue, consume, retries, the sweep, size and purge; the
    core refuses what needs a facet (reading the dead-letter queue, flows, ...) with a clear code.
    """

    protocol: ClassVar[str] = "jsonfile-basic"

    # --8<-- [end:required-class]

    # --8<-- [start:construct]
    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        # Validate everything, touch nothing: construction does no I/O.  The reader refuses
        # unknown keys and bad values with queue/invalid-config, naming the option.
        read = OptionReader(
            self.options,
            backend=f"backend {context.name!r} (protocol {self.protocol!r})",
            known=("path", "fsync"),
        )
        self._path = Path(read.path("path", "blamequeue-jobs.json")).absolute()
        self._fsync = bool(read.flag("fsync", True))
        self._limiter: anyio.CapacityLimiter | None = None

    # --8<-- [end:construct]

    @property
    def store_path(self) -> str | None:
        return str(self._path)

    # -- the transaction: lock, load, apply, write back ------------------------------------
    # --8<-- [start:transaction]
    @contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        with open(self._path.with_name(self._path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield  # closing the file releases the lock

    def _load(self) -> State:
        try:
            text = self._path.read_text("utf-8")
        except FileNotFoundError:
            return {"next_seq": 1, "jobs": {}}
        try:
            state: State = json.loads(text)
        except ValueError as exc:
            raise BackendUnavailableError(
                f"{self._path} is not a jobs file this backend wrote ({exc}); restore it from "
                f"a backup or point 'path' at another file",
                retryable=False,
            ) from exc
        return state

    def _save(self, state: State) -> None:
        temporary = self._path.with_name(self._path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(state, out, separators=(",", ":"))
            if self._fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, self._path)  # readers see the old file or the new one, whole
        if self._fsync:
            directory = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def _transact(self, apply: Callable[[State], T], save: Callable[[T], bool] | None) -> T:
        """Runs in a worker thread: one atomic transition of the file.

        ``save`` tells from the result whether the state changed (``None``: a read).  An
        unchanged file is not rewritten: a rewrite wakes every idle consumer of the file.
        """
        try:
            with self._locked(exclusive=save is not None):
                state = self._load()
                result = apply(state)
                if save is not None and save(result):
                    self._save(state)
                return result
        except OSError as exc:
            raise BackendUnavailableError(
                f"cannot use the jobs file {self._path}: {exc.strerror or exc}"
            ) from exc

    async def _write(self, apply: Callable[[State], T], changed: Callable[[T], bool]) -> T:
        return await self._in_thread(apply, changed)

    async def _read(self, apply: Callable[[State], T]) -> T:
        return await self._in_thread(apply, None)

    async def _in_thread(self, apply: Callable[[State], T], save: Callable[[T], bool] | None) -> T:
        if self._limiter is None:  # made on first use, inside the event loop
            self._limiter = anyio.CapacityLimiter(4)
        return await anyio.to_thread.run_sync(
            lambda: self._transact(apply, save), limiter=self._limiter
        )

    # --8<-- [end:transaction]

    # --8<-- [start:methods]
    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        await anyio.Path(self._path.parent).mkdir(parents=True, exist_ok=True)

    # -- producing and consuming -----------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        await self._write(lambda state: _enqueue(state, jobs), lambda _: True)

    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        return await self._write(
            lambda state: _lease(state, queue, limit, now, lease_seconds), changed=bool
        )

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        return await self._write(lambda state: _settle(state, settlements), changed=any)

    async def extend(self, leases: Sequence[tuple[str, str]], *, expires_at: float) -> list[bool]:
        return await self._write(lambda state: _extend(state, leases, expires_at), changed=any)

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        return await self._write(
            lambda state: _sweep(state, now, retain_done, expired_error),
            changed=lambda swept: bool(swept.repended or swept.dead or swept.pruned),
        )

    # -- inspecting and operating ---------------------------------------------------------
    async def size(self, queue: str) -> int:
        return await self._read(lambda state: len(_of_queue(state, queue, *_LIVE)))

    async def purge(self, queue: str) -> int:
        return await self._write(lambda state: _purge(state, queue), lambda _: True)

    # --8<-- [end:methods]


# --8<-- [start:facet]
class JsonFileBackend(JsonFileStore, DeadLetters, Flows, Wakeup):
    """The ``jsonfile`` protocol: :class:`JsonFileStore` and three facets.

    ``{"protocol": "jsonfile", "path": "jobs.json"}``.  :class:`~blamequeue.abc.DeadLetters`
    lets the core list, retry and purge dead jobs; :class:`~blamequeue.abc.Flows` lets it park
    flow children (the required methods already store and release them);
    :class:`~blamequeue.abc.Wakeup` makes an idle consumer notice another process's enqueue at
    once.  Its capabilities follow: ``dlq``, ``flows`` and ``cross_process_wakeup``.
    """

    protocol: ClassVar[str] = "jsonfile"

    # -- DeadLetters ---------------------------------------------------------------------
    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        return await self._read(lambda state: _dlq_list(state, queue, limit))

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        return await self._write(
            lambda state: _dlq_retry(state, job_id, now), changed=lambda job: job is not None
        )

    async def dlq_size(self, queue: str) -> int:
        return await self._read(lambda state: len(_of_queue(state, queue, "dead")))

    async def dlq_purge(self, queue: str) -> int:
        return await self._write(lambda state: _dlq_purge(state, queue), changed=bool)

    # -- Flows ----------------------------------------------------------------------------
    async def flow_jobs(self, flow_id: str) -> list[StoredJob]:
        return await self._read(lambda state: _flow_jobs(state, flow_id))

    # -- Wakeup ---------------------------------------------------------------------------
    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        # Another process's write replaces the file: its inode and mtime change.  Waking for
        # any change is fine (the consumer just leases again and may find nothing).
        def signature() -> tuple[int, int] | None:
            try:
                stat = os.stat(self._path)
            except FileNotFoundError:
                return None
            return (stat.st_ino, stat.st_mtime_ns)

        before = await anyio.to_thread.run_sync(signature)
        with anyio.move_on_after(max(0.0, timeout)):
            while True:
                await anyio.sleep(_WAKE_POLL)
                if await anyio.to_thread.run_sync(signature) != before:
                    return


# --8<-- [end:facet]
