"""Batches: a group of task jobs with callbacks when the group finishes (SPEC §9).

Everything lives in the backend's shared records, so any process can follow a batch and the
callbacks fire even after the dispatching process is gone:

* ``batch/<id>``: the batch's description (name, queue, callbacks as task name + payload) and
  its counters ``total``, ``pending``, ``processed``, ``failed``;
* ``batch-failed/<id>:<job id>``: each job that failed for good, with its error text;
* ``batch-flag/<id>:<flag>``: ``cancelled`` and the ``fired:<callback>`` claims.

**Sealed.** What a caller or handler supplied is sealed like a job's payload (SPEC §6): each
callback's payload (bound to its batch, its callback and the task, queue, tries and timeout it
dispatches, so a callback rewritten in the store does not run) and each failed job's error text
(bound to its batch and job).  Names and numbers stay readable: the batch's id, name and queue,
the callbacks' task and queue names, the counters.

**Write order.** The batch record is written first, then every job in one enqueue (all or
none); if the enqueue fails the record is deleted, so no batch waits for jobs that do not
exist.  A worker can only finish a job that exists, so it always finds the record.

**Counting.** When a worker's settlement of a batch job is recorded as ``done`` or ``dead`` it
adds to the counters with the job id as ``once`` token: a repeated update (a retried call)
counts once.  A job that will be retried counts nothing yet.  Whichever worker's update
brings ``pending`` to 0 fires ``then`` (no failure) and ``finally``; the first failure fires
``catch`` and, unless ``allow_failures``, cancels the batch.  Each callback is claimed before
it is enqueued (``fired:<callback>``, written only if absent), so it is enqueued once.  The
update runs after the job's settlement, so a worker dying in between leaves the batch
pending: at-least-once settles, at-most-once counting for that job.

**Cancelled batches.** Workers check the batch (cached a second) before running its job; a
job of a cancelled batch completes without running its handler (counted ``processed``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Protocol

import attrs

from ._clock import to_datetime
from ._codec import Codec, dumps, place
from ._ids import new_job_id
from ._job_ids import refuse_chosen_in_batch
from ._job_meta import BATCH_KEY, TIMEOUT_KEY, JobMeta
from ._job_seals import CONTEXT_META_KEY, TASK_META_KEY, meta_text, seal_jobs
from ._records import RecordStore, decode_value
from ._runtime import BackendRuntime
from ._tasks import PendingDispatch, TaskQueue, to_wire
from ._tracing import sending
from ._validation import check_delay
from .abc import NewJob, StoredJob
from .errors import BadArgumentError, NotFoundError, QueueError

__all__ = ["BATCH_META_KEY", "Batch", "PendingBatch", "batch_of", "on_batch_job", "skip_job"]

BATCH_META_KEY: Final = BATCH_KEY
"""The job meta key holding a batch job's batch id."""

_BATCH, _FAILED, _FLAG = "batch", "batch-failed", "batch-flag"

#: The attribute of a batch's ``send`` span naming the batch.
_BATCH_ID_ATTRIBUTE: Final = "messaging.blamequeue.batch.id"

_CALLBACKS: Final = ("then", "catch", "finally", "progress")
_CANCEL_CACHE = 1.0


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


class BatchQueue(TaskQueue, Protocol):
    """What batches need of their queue (a :class:`Queue`): task jobs to build and enqueue,
    and the queue's batch methods, which a :class:`Batch` forwards to."""

    def job(self, task: Any, payload: Any = None) -> PendingDispatch: ...
    def _known_runtime(self, backend: str | None) -> BackendRuntime | None: ...
    def _build_task_jobs(
        self, runtime: BackendRuntime, options: Mapping[str, Any]
    ) -> list[NewJob]: ...
    def _announce(self, runtime: BackendRuntime, queue_name: str, ids: Sequence[str]) -> None: ...
    async def _dispatch_batch(self, spec: PendingBatch) -> Batch: ...
    async def find_batch(self, batch_id: str, *, backend: str | None = None) -> Batch | None: ...
    async def cancel_batch(self, batch_id: str, *, backend: str | None = None) -> bool: ...
    async def add_to_batch(
        self, batch_id: str, jobs: Iterable[Any], *, backend: str | None = None
    ) -> list[str]: ...


@attrs.frozen(kw_only=True, eq=False)
class Batch:
    """A batch as the backend holds it now (``queue.find_batch``); refresh with
    :meth:`refresh`."""

    id: str
    name: str | None
    queue: str
    backend: str
    total: int
    pending: int
    processed: int
    failed: int
    failed_job_ids: Sequence[str]
    allow_failures: bool
    created_at: datetime
    cancelled_at: datetime | None
    finished_at: datetime | None
    _owner: BatchQueue = attrs.field(repr=False, alias="owner")

    @property
    def progress(self) -> float:
        """Percent of the jobs processed or failed (0..100)."""
        return 100.0 if not self.total else 100.0 * (self.total - self.pending) / self.total

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None

    @property
    def has_failures(self) -> bool:
        return self.failed > 0

    async def refresh(self) -> Batch:
        found = await self._owner.find_batch(self.id, backend=self.backend)
        if found is None:
            raise NotFoundError("queue/job-not-found", f"batch {self.id!r} was pruned")
        return found

    async def cancel(self) -> bool:
        """Cancel the batch: its jobs not started yet complete without running.  Returns
        ``False`` when it was cancelled already."""
        return await self._owner.cancel_batch(self.id, backend=self.backend)

    async def add(self, jobs: Iterable[Any]) -> list[str]:
        """Add jobs to the batch (while it is not finished); returns their ids."""
        return await self._owner.add_to_batch(self.id, jobs, backend=self.backend)


@attrs.frozen(kw_only=True)
class PendingBatch:
    """A batch being put together: ``queue.batch(jobs)`` and the setters, then
    ``dispatch()``.  Each setter returns a new builder."""

    owner: BatchQueue
    jobs: tuple[PendingDispatch, ...]
    batch_name: str | None = None
    queue_name: str | None = None
    backend: str | None = None
    failures_allowed: bool = False
    callbacks: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    def name(self, name: str) -> PendingBatch:
        if not isinstance(name, str) or not name:
            raise _bad(f"a batch name must be a non-empty string, got {name!r}")
        return attrs.evolve(self, batch_name=name)

    def on_queue(self, queue_name: str) -> PendingBatch:
        from ._validation import check_queue_name

        return attrs.evolve(self, queue_name=check_queue_name(queue_name))

    def on_backend(self, backend: str) -> PendingBatch:
        return attrs.evolve(self, backend=backend)

    def allow_failures(self, allow: bool = True) -> PendingBatch:
        """Keep going after a job fails for good (default: the batch is cancelled)."""
        return attrs.evolve(self, failures_allowed=bool(allow))

    def _callback(self, which: str, task: Any, payload: Any) -> PendingBatch:
        pending = self.owner.job(task, payload)  # refuses an unknown task: queue/unknown-job
        options = pending._options()
        # Stored with the batch, so whichever process finishes it can dispatch the callback
        # without having the task registered.
        spec = {
            "task": pending.settings.name,
            "payload": to_wire(options["payload"]),
            "queue": options["queue_name"],
            "tries": options["max_attempts"],
            "timeout": options["timeout"],
        }
        try:
            json.dumps(spec)
        except (TypeError, ValueError) as exc:
            raise _bad(f"the {which} callback's payload must be JSON-serialisable: {exc}") from exc
        # Refused now, not when the batch finishes: keys JSON would change, or over the size
        # the backend takes (queue/bad-payload, queue/payload-too-large).
        runtime = self.owner._known_runtime(self.backend or None)
        dumps(spec["payload"], None if runtime is None else runtime.max_payload_bytes)
        return attrs.evolve(self, callbacks={**self.callbacks, which: spec})

    def then(self, task: Any, payload: Any = None) -> PendingBatch:
        """Dispatch ``task`` when every job succeeded."""
        return self._callback("then", task, payload)

    def catch(self, task: Any, payload: Any = None) -> PendingBatch:
        """Dispatch ``task`` on the first job that fails for good."""
        return self._callback("catch", task, payload)

    def finally_(self, task: Any, payload: Any = None) -> PendingBatch:
        """Dispatch ``task`` when the batch finished, failures or not."""
        return self._callback("finally", task, payload)

    def progress(self, task: Any, payload: Any = None) -> PendingBatch:
        """Dispatch ``task`` each time a job of the batch succeeds."""
        return self._callback("progress", task, payload)

    async def dispatch(self) -> Batch:
        return await self.owner._dispatch_batch(self)


def to_dispatches(owner: BatchQueue, jobs: Iterable[Any]) -> tuple[PendingDispatch, ...]:
    """Accept ``queue.job(...)`` builders and ``(task, payload)`` pairs."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        raise _bad(f"a batch takes a list of jobs, got {type(jobs).__name__}")
    out: list[PendingDispatch] = []
    for item in jobs:
        if isinstance(item, PendingDispatch):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            out.append(owner.job(item[0], item[1]))
        else:
            raise _bad(
                f"each batch job is queue.job(task, payload) or a (task, payload) pair, "
                f"got {item!r}"
            )
    if not out:
        raise _bad("a batch needs at least one job")
    return tuple(out)


def batch_of(stored: StoredJob) -> str | None:
    """The batch id of a stored job, if it belongs to one."""
    return JobMeta.parse(stored.meta).batch


# -- the queue's side ---------------------------------------------------------------------------
async def create(owner: BatchQueue, spec: PendingBatch) -> Batch:
    runtime = owner._runtime(spec.backend)
    store = RecordStore(runtime)
    queue_name = spec.queue_name or spec.jobs[0].queue_name or spec.jobs[0].settings.queue
    batch_id = "batch-" + new_job_id()[4:]
    # One send span for the whole batch, current while its jobs are built: each job carries
    # its context, so every job's process span is its child.
    with sending(queue_name) as sent:
        jobs = _build(owner, runtime, batch_id, queue_name, spec.jobs)
        now = store.now()
        description = {
            "id": batch_id,
            "name": spec.batch_name,
            "queue": queue_name,
            "allow_failures": spec.failures_allowed,
            "created_at": now,
            "callbacks": {
                which: _sealed_callback(runtime.codec, batch_id, which, callback)
                for which, callback in spec.callbacks.items()
            },
        }
        await store.put(_BATCH, batch_id, description)
        await store.add(_BATCH, batch_id, {"total": len(jobs), "pending": len(jobs)})
        try:
            await runtime.call("enqueue", lambda: runtime.backend.enqueue(jobs))
        except BaseException:
            await store.delete(_BATCH, batch_id)  # no batch waiting for jobs that do not exist
            raise
        sent([job.id for job in jobs], {_BATCH_ID_ATTRIBUTE: batch_id})
    owner._announce(runtime, queue_name, [job.id for job in jobs])
    runtime.events.emit(
        "batch.added",
        queue=queue_name,
        backend=runtime.name,
        at=now,
        data={"batch_id": batch_id, "jobs": len(jobs)},
    )
    found = await find(owner, runtime, batch_id)
    assert found is not None
    return found


def _callback_place(batch_id: str, which: str, spec: Mapping[str, Any]) -> bytes:
    """Where the payload of a batch's ``which`` callback belongs: the batch, the callback, and
    everything else the callback's record says (task, queue, tries, timeout), so that
    rewriting any of it in the store makes the payload refuse to open."""
    rest = {key: value for key, value in spec.items() if key not in ("payload", "payload_text")}
    return place("batch", batch_id, f"callback:{which}", json.dumps(rest, sort_keys=True))


def _sealed_callback(
    codec: Codec, batch_id: str, which: str, spec: Mapping[str, Any]
) -> dict[str, Any]:
    """A callback as the batch record stores it: its payload's JSON text sealed (kept under
    ``payload_text``: with ``seal=False`` the text is plain JSON)."""
    rest = {key: value for key, value in spec.items() if key != "payload"}
    text = codec.seal_text(dumps(spec["payload"]), _callback_place(batch_id, which, rest))
    return {**rest, "payload_text": text}


def _opened_callback(
    codec: Codec, batch_id: str, which: str, stored: Mapping[str, Any]
) -> dict[str, Any]:
    """The callback :func:`_sealed_callback` stored, its payload opened (``queue/unseal-failed``
    when it was tampered with)."""
    rest = {key: value for key, value in stored.items() if key not in ("payload", "payload_text")}
    if "payload_text" in stored:
        where = _callback_place(batch_id, which, rest)
        return {**rest, "payload": json.loads(codec.open_text(stored["payload_text"], where))}
    if not codec.sealed:  # written by an older version, which kept the payload itself
        return {**rest, "payload": stored.get("payload")}
    raise QueueError(
        "queue/unseal-failed",
        f"the {which} callback of batch {batch_id!r} holds no sealed payload: the record was "
        f"written without sealing or altered outside blamequeue, so the callback is not run",
    )


def _error_place(batch_id: str, job_id: str) -> bytes:
    """Where the sealed error text of a batch's failed job belongs."""
    return place("batch", batch_id, "error", job_id)


def _build(
    owner: BatchQueue,
    runtime: BackendRuntime,
    batch_id: str,
    queue_name: str,
    dispatches: Sequence[PendingDispatch],
) -> list[NewJob]:
    jobs: list[NewJob] = []
    for pending in dispatches:
        options = pending._options()
        options["queue_name"] = queue_name
        options["meta"] = {**options["meta"], BATCH_META_KEY: batch_id}
        options.pop("backend", None)
        refuse_chosen_in_batch(options.pop("chosen_id", None), "a batch")
        jobs += owner._build_task_jobs(runtime, options)
    return jobs


async def add(
    owner: BatchQueue, batch_id: str, more: Iterable[Any], backend: str | None
) -> list[str]:
    runtime = owner._runtime(backend)
    store = RecordStore(runtime)
    record = await store.get(_BATCH, batch_id)
    if record is None:
        raise NotFoundError("queue/job-not-found", f"no batch {batch_id!r} (pruned?)")
    description = decode_value(record)
    if int(record.counters.get("pending", 0)) == 0 and int(record.counters.get("total", 0)):
        raise _bad(f"batch {batch_id!r} has finished; dispatch a new batch for more jobs")
    dispatches = to_dispatches(owner, more)
    with sending(description["queue"]) as sent:
        jobs = _build(owner, runtime, batch_id, description["queue"], dispatches)
        await store.add(_BATCH, batch_id, {"total": len(jobs), "pending": len(jobs)})
        try:
            await runtime.call("enqueue", lambda: runtime.backend.enqueue(jobs))
        except BaseException:
            await store.add(_BATCH, batch_id, {"total": -len(jobs), "pending": -len(jobs)})
            raise
        sent([job.id for job in jobs], {_BATCH_ID_ATTRIBUTE: batch_id})
    runtime.notify(description["queue"])
    return [job.id for job in jobs]


async def find(owner: BatchQueue, runtime: BackendRuntime, batch_id: str) -> Batch | None:
    store = RecordStore(runtime)
    record = await store.get(_BATCH, batch_id)
    if record is None:
        return None
    return await _to_batch(owner, runtime, store, record.counters, decode_value(record))


async def _to_batch(
    owner: BatchQueue,
    runtime: BackendRuntime,
    store: RecordStore,
    counters: Mapping[str, float],
    description: Mapping[str, Any],
) -> Batch:
    batch_id = description["id"]
    failed = await store.list(_FAILED, prefix=f"{batch_id}:")
    flags = {
        r.key.split(":", 1)[1]: decode_value(r)
        for r in await store.list(_FLAG, prefix=f"{batch_id}:")
    }
    cancelled, finished = flags.get("cancelled"), flags.get("fired:finally")
    return Batch(
        id=batch_id,
        name=description.get("name"),
        queue=description["queue"],
        backend=runtime.name,
        total=int(counters.get("total", 0)),
        pending=int(counters.get("pending", 0)),
        processed=int(counters.get("processed", 0)),
        failed=int(counters.get("failed", 0)),
        failed_job_ids=[r.key.split(":", 1)[1] for r in failed],
        allow_failures=bool(description.get("allow_failures")),
        created_at=to_datetime(float(description["created_at"])),
        cancelled_at=None if cancelled is None else to_datetime(float(cancelled)),
        finished_at=None if finished is None else to_datetime(float(finished)),
        owner=owner,
    )


async def all_batches(owner: BatchQueue, runtime: BackendRuntime, limit: int) -> list[Batch]:
    store = RecordStore(runtime)
    out = []
    for record in await store.list(_BATCH, limit=limit):
        out.append(await _to_batch(owner, runtime, store, record.counters, decode_value(record)))
    out.sort(key=lambda b: b.created_at, reverse=True)
    return out


async def cancel(runtime: BackendRuntime, batch_id: str) -> bool:
    store = RecordStore(runtime)
    if await store.get(_BATCH, batch_id) is None:
        raise NotFoundError("queue/job-not-found", f"no batch {batch_id!r} (pruned?)")
    return await store.put(_FLAG, f"{batch_id}:cancelled", store.now(), if_absent=True)


async def prune(runtime: BackendRuntime, older_than: float) -> int:
    """Delete finished batches finished more than ``older_than`` seconds ago."""
    check_delay(older_than, "older_than")
    store = RecordStore(runtime)
    cutoff = store.now() - older_than
    pruned = 0
    for record in await store.list(_BATCH):
        batch_id = record.key
        finished = await store.get_value(_FLAG, f"{batch_id}:fired:finally")
        if finished is None or float(finished) > cutoff:
            continue
        for kind in (_FAILED, _FLAG):
            for item in await store.list(kind, prefix=f"{batch_id}:"):
                await store.delete(kind, item.key)
        await store.delete(_BATCH, batch_id)
        pruned += 1
    return pruned


async def _dispatch_callback(
    runtime: BackendRuntime, spec: Mapping[str, Any], batch_id: str
) -> None:

    meta: dict[str, Any] = {TASK_META_KEY: spec["task"], CONTEXT_META_KEY: {"batch_id": batch_id}}
    if spec.get("timeout") is not None:
        meta[TIMEOUT_KEY] = spec["timeout"]
    now = runtime.clock.now()
    job_id = new_job_id()
    draft = NewJob(
        id=job_id,
        queue=spec["queue"],
        payload=dumps(spec["payload"]),
        priority=0,
        max_attempts=spec.get("tries") or runtime.max_attempts,
        created_at=now,
        available_at=now,
        classification=None,
        trace_id=None,
        meta=meta_text(runtime.codec, meta, spec["queue"], job_id),
    )
    jobs = seal_jobs(runtime.codec, [draft])
    await runtime.call("enqueue", lambda: runtime.backend.enqueue(jobs))
    runtime.notify(spec["queue"])


# -- the worker's side ----------------------------------------------------------------------------
async def skip_job(runtime: BackendRuntime, batch_id: str | None) -> bool:
    """Whether a job of batch ``batch_id`` (``None``: of none) must complete without running
    (its batch was cancelled)."""
    if batch_id is None or not runtime.backend.capabilities.records:
        return False
    now = runtime.clock.now()
    cached = runtime.batches_cancelled.get(batch_id)
    if cached is not None and now - cached[1] < _CANCEL_CACHE:
        return cached[0]
    try:
        flag = await RecordStore(runtime).get(_FLAG, f"{batch_id}:cancelled")
    except QueueError:
        return False  # cannot tell: run it (a cancel is best effort for running batches)
    runtime.batches_cancelled[batch_id] = (flag is not None, now)
    return flag is not None


async def on_batch_job(
    runtime: BackendRuntime,
    stored: StoredJob,
    batch_id: str | None,
    outcome: str,
    error: str | None,
) -> None:
    """Count a job of batch ``batch_id`` that ended (``done`` / ``dead``) and fire the
    callbacks it triggers."""
    if batch_id is None or outcome not in ("done", "dead"):
        return
    if not runtime.backend.capabilities.records:
        return
    store = RecordStore(runtime)
    if outcome == "done":
        deltas = {"pending": -1, "processed": 1}
    else:
        deltas = {"pending": -1, "failed": 1}
        text = runtime.codec.seal_text((error or "")[:500], _error_place(batch_id, stored.id))
        await store.put(_FAILED, f"{batch_id}:{stored.id}", {"error": text})
    record, applied = await store.add(_BATCH, batch_id, deltas, once=stored.id)
    if not applied or record.value is None:
        return
    description = decode_value(record)
    callbacks = description.get("callbacks", {})
    counters = record.counters
    now = store.now()

    async def fire(which: str, *, once: bool = True) -> None:
        spec = callbacks.get(which)
        if spec is None:
            return
        if once and not await store.put(_FLAG, f"{batch_id}:fired:{which}", now, if_absent=True):
            return
        opened = _opened_callback(runtime.codec, batch_id, which, spec)
        await _dispatch_callback(runtime, opened, batch_id)

    def tell(event: str) -> None:
        data = {"batch_id": batch_id, "failed": int(counters.get("failed", 0))}
        runtime.events.emit(
            event, queue=stored.queue, backend=runtime.name, at=now, job_id=stored.id, data=data
        )

    if outcome == "done":
        await fire("progress", once=False)
    elif int(counters.get("failed", 0)) == 1:
        if not description.get("allow_failures"):
            await store.put(_FLAG, f"{batch_id}:cancelled", now, if_absent=True)
        await fire("catch")
        tell("batch.failed")
    if int(counters.get("pending", 0)) <= 0:
        if int(counters.get("failed", 0)) == 0:
            await fire("then")
        if "finally" not in callbacks:
            await store.put(_FLAG, f"{batch_id}:fired:finally", now, if_absent=True)
        await fire("finally")
        tell("batch.completed")
