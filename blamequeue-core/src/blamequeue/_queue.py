"""The :class:`Queue`: the public entry point that ties backends, policies and loops together."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, TypeVar, overload

import anyio
import attrs
from anyio.abc import TaskGroup

from ._audit import Auditor, AuditSink, registered_sinks
from ._backoff import BackoffOption, parse_backoff, parse_backoff_option
from ._batches import Batch, PendingBatch, all_batches, to_dispatches
from ._batches import add as add_to_batch
from ._batches import cancel as cancel_batch
from ._batches import create as create_batch
from ._batches import find as find_batch
from ._batches import prune as prune_batches
from ._cancellation import cancel_job
from ._clock import SystemClock
from ._codec import LEASE_EXPIRED, dumps, payload_place
from ._consumer import Consumer
from ._environment import config_from_env
from ._events import EventBus, EventSubscription, QueueEvent
from ._execution import Handler, emit_dead, to_dead_letter, to_job
from ._flow_deaths import audit_failed_dependants
from ._flows import flow_name, plan_flow
from ._health import HealthReport, HealthThresholds, check_report
from ._ids import new_job_ids
from ._inspection import (
    check_cursor,
    check_job_id,
    check_page_limit,
    check_state,
    to_job_info,
    to_queue_info,
    to_worker_info,
)
from ._job_edits import change_delay, change_priority, promote, rerun, update_payload
from ._job_ids import check_chosen_id, check_lifo, enqueue_chosen, refuse_chosen_in_batch
from ._job_logging import jobs_extra
from ._job_logs import last_progress, read_logs
from ._job_seals import CONTEXT_META_KEY, meta_text, seal_jobs
from ._limits import check_group_key, parse_lease_limits
from ._metrics import FLUSH_INTERVAL, QueueMetrics, check_window, flush_metrics, read_metrics
from ._models import (
    BackendStatus,
    BreakerState,
    DeadLetter,
    FlowChild,
    FlowChildStatus,
    FlowJob,
    FlowResult,
    FlowStatus,
    Job,
    JobInfo,
    JobLogLine,
    JobPage,
    QueueInfo,
    RateLimit,
    TickResult,
    WorkerInfo,
)
from ._notifications import DeadJobNotifier
from ._pause import is_paused, set_paused
from ._plugins import load_registry
from ._presence import LIVE_FOR
from ._progress import Subscription
from ._queue_watch import QueueWatch
from ._rate_limited import rate_limited_until
from ._records import RecordStore
from ._results import check_timeout, not_found, require_results, wait_for_result
from ._retention import prune_finished
from ._runtime import BackendRuntime, build_runtime
from ._schedules import Overlap, Schedule, Scheduler, ScheduleStatus
from ._sealing import parse_seal_config
from ._tasks import FunctionTask, PendingDispatch, Task, TaskRegistry, to_wire
from ._tasks import task as declare_task
from ._tick import run_tick
from ._timeouts import TIMEOUT_KEY
from ._tracing import add_trace_context, traced_send
from ._uniqueness import enqueue_unique, refuse_in_batch, unique_claim
from ._validation import (
    check_callable,
    check_delay,
    check_max_attempts,
    check_optional_str,
    check_positive_int,
    check_positive_seconds,
    check_priority,
    check_queue_name,
)
from .abc import (
    Clock,
    CrossQueueFlows,
    DeadLetters,
    FlowPolicies,
    Flows,
    Inspection,
    JobIds,
    Lifo,
    NewJob,
    QueueEvents,
    StoredJob,
)
from .errors import (
    BadArgumentError,
    ConfigError,
    FlowError,
    NotFoundError,
    QueueError,
)

__all__ = ["Queue"]

log = logging.getLogger("blamequeue")

_CLOSE_TIMEOUT = 10.0
_ABORT_GRACE = 5.0
#: Dead jobs :meth:`Queue.dlq_retry_all` lists at a time, past those it already retried.
_RETRY_ALL_PAGE = 500

P = TypeVar("P")
R = TypeVar("R")


def _config_error(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


class Queue:
    """A durable job queue over one or more named backends.

    Construction validates everything and does no I/O; ``await queue.start()`` (or
    ``async with queue:``) opens the backends and starts the sweep timer.
    """

    def __init__(
        self,
        backends: Mapping[str, Mapping[str, Any]],
        default_backend: str | None = None,
        sweep_interval: float = 30.0,
        seal: Mapping[str, Any] | bool | None = None,
        audit_sinks: Iterable[AuditSink] = (),
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(backends, Mapping) or not backends:
            raise _config_error(
                "backends must be a non-empty mapping of name to config, e.g. "
                '{"primary": {"protocol": "local"}}'
            )
        for name in backends:
            if not isinstance(name, str) or not name:
                raise _config_error(f"backend names must be non-empty strings, got {name!r}")
        if default_backend is None:
            if len(backends) > 1:
                raise _config_error(
                    f"default_backend is required when there are several backends; "
                    f"pick one of {sorted(backends)}"
                )
            default_backend = next(iter(backends))
        elif not isinstance(default_backend, str) or default_backend not in backends:
            raise _config_error(
                f"default_backend {default_backend!r} is not configured; "
                f"configured backends: {sorted(backends)}"
            )
        check_delay(sweep_interval, "sweep_interval", config=True)  # 0 turns the timer off
        if seal is not None:
            parse_seal_config(seal, "seal")  # checked even when every backend has its own
        self._clock: Clock = clock if clock is not None else SystemClock()
        if not callable(getattr(self._clock, "now", None)) or not callable(
            getattr(self._clock, "sleep", None)
        ):
            raise _config_error("clock must have now() and async sleep(seconds)")
        try:
            sinks = list(audit_sinks)
        except TypeError as exc:
            raise _config_error(
                f"audit_sinks must be a list of sinks (objects with async emit(event)), got "
                f"{type(audit_sinks).__name__}"
            ) from exc
        for sink in sinks:
            if not callable(getattr(sink, "emit", None)):
                raise _config_error(f"audit sink {sink!r} has no async emit(event) method")
        registry = load_registry()
        self._auditor = Auditor(clock=self._clock)
        self._auditor.add(sinks)
        self._auditor.add(registered_sinks(registry))
        self._seal = seal
        self._default = default_backend
        self._sweep_interval = float(sweep_interval)
        self._runtimes: dict[str, BackendRuntime] = {
            name: build_runtime(
                name,
                config,
                registry=registry,
                clock=self._clock,
                auditor=self._auditor,
                seal=seal,
                env=os.environ,
            )
            for name, config in backends.items()
        }
        self._started = False
        self._closed = False
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._consumers: list[Consumer] = []
        self._tasks = TaskRegistry(self)
        self._events = EventBus()
        self._scheduler = Scheduler(self)
        self._notifiers: list[DeadJobNotifier] = []
        for runtime in self._runtimes.values():
            runtime.events = self._events
            if runtime.publisher is not None:
                self._events.tap(runtime.name, runtime.publisher)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> Queue:
        """A one-backend queue named ``default`` from ``BLAMEQUEUE_*`` variables."""
        config, queue_kwargs = config_from_env(os.environ if env is None else env)
        queue_kwargs.update(kwargs)
        return cls(backends={"default": config}, **queue_kwargs)

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def default_backend(self) -> str:
        return self._default

    async def start(self) -> None:
        """Open every backend and start the sweep timer.  A second call does nothing."""
        if self._started:
            return
        if self._closed:
            raise QueueError(
                "queue/not-initialized",
                "this queue was shut down; build a new Queue to start again",
            )
        stack = AsyncExitStack()
        try:
            for runtime in self._runtimes.values():
                await runtime.call("open", runtime.backend.open)
                stack.push_async_callback(self._close_backend, runtime)
                await runtime.prepare_seal()
            await self._auditor.prepare(self._runtimes[self._default].seal)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise
        self._stack = stack
        self._started = True
        self._events.attach(self._tg)
        for notifier in self._notifiers:
            self._tg.start_soon(notifier.run)
        if self._sweep_interval > 0:
            self._tg.start_soon(self._sweep_loop)
        if any(r.backend.capabilities.records for r in self._runtimes.values()):
            self._tg.start_soon(self._metrics_loop)
        for runtime in self._runtimes.values():
            if runtime.publisher is not None:
                self._tg.start_soon(runtime.publisher.run)

    @staticmethod
    async def _close_backend(runtime: BackendRuntime) -> None:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            try:
                await runtime.backend.close()
            except Exception:
                log.exception("closing backend %r failed", runtime.name)

    async def shutdown(self, *, timeout: float = 30.0) -> None:
        """Stop consumers, wait up to ``timeout`` seconds for running handlers, release the jobs
        of those still running, stop the sweep timer and close the backends.  Idempotent."""
        if not self._started or self._closed:
            return
        check_delay(timeout, "timeout")
        self._closed = True
        consumers = list(self._consumers)
        for consumer in consumers:
            consumer.cancel()
        try:
            with anyio.move_on_after(timeout):
                for consumer in consumers:
                    await consumer.wait_stopped()
        finally:
            # Also when the caller's scope is being cancelled (the body of `async with queue`
            # was cancelled from outside): the task group start() entered must still be exited
            # here, in the task that entered it, and running jobs handed back.
            late = [c for c in consumers if not c.stopped]
            for consumer in late:
                consumer.abort()
            if late:
                with anyio.move_on_after(_ABORT_GRACE, shield=True):
                    for consumer in late:
                        await consumer.wait_stopped()
            assert self._tg is not None
            assert self._stack is not None
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                for runtime in self._runtimes.values():
                    await self._flush_metrics(runtime)
                for notifier in self._notifiers:
                    await notifier.flush()
                for runtime in self._runtimes.values():
                    if runtime.publisher is not None:
                        await runtime.publisher.flush()
                await self._auditor.close()
            self._tg.cancel_scope.cancel()
            self._events.attach(None)
            self._started = False
            # A shut-down queue cannot start again: its tasks dispatch to no queue rather
            # than to this one (the next test's Queue, say, registers them afresh).
            self._tasks.detach()
            # Not inside a new scope: the task group must exit in the scope it was entered in.
            # Each backend close shields itself (_close_backend).
            await self._stack.aclose()

    async def __aenter__(self) -> Queue:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- helpers -----------------------------------------------------------------------------
    def _runtime(self, backend: str | None) -> BackendRuntime:
        if not self._started:
            raise QueueError(
                "queue/not-initialized",
                "the queue is not started; use `async with queue:` or `await queue.start()` "
                "first" + (" (it was shut down)" if self._closed else ""),
            )
        name = self._default if backend is None else backend
        runtime = self._runtimes.get(name) if isinstance(name, str) else None
        if runtime is None:
            raise NotFoundError(
                "queue/unknown-backend",
                f"no backend named {name!r}; configured backends: {sorted(self._runtimes)}",
            )
        return runtime

    def _known_runtime(self, backend: str | None) -> BackendRuntime | None:
        """The runtime of ``backend`` (default: the default backend) if it is configured,
        started or not."""
        return self._runtimes.get(self._default if backend is None else backend)

    def _dlq_runtime(self, backend: str | None) -> BackendRuntime:
        runtime = self._runtime(backend)
        if not runtime.backend.capabilities.dlq:
            raise runtime.unsupported(
                "queue/dlq-unsupported",
                "keeps no dead-letter queue blamequeue can read; inspect it with the store's own "
                "tools",
            )
        return runtime

    def records(self, backend: str | None = None) -> RecordStore:
        """The shared records of ``backend`` (default: the default backend), which batches,
        schedules, metrics and pause flags keep their state in; ``queue/records-unsupported``
        on a backend that keeps none (``sqs``)."""
        return RecordStore(self._runtime(backend))

    def _flow_runtime(self, backend: str | None) -> BackendRuntime:
        runtime = self._runtime(backend)
        if not runtime.backend.capabilities.flows:
            raise runtime.unsupported(
                "queue/flow-unsupported",
                "cannot park flow children and release them when their dependencies are done; "
                "run flows on a backend whose capabilities include flows (e.g. 'local', "
                "'memory')",
            )
        return runtime

    def _build_jobs(
        self,
        runtime: BackendRuntime,
        queue_name: str,
        payloads: Sequence[Any],
        *,
        priority: Any,
        delay: Any,
        max_attempts: Any,
        classification: Any,
        trace_id: Any,
        backoff: Any,
        extra_meta: Mapping[str, Any] | None = None,
        group_key: Any = None,
        timeout: Any = None,
        job_id: str | None = None,
        lifo: Any = False,
        seal: bool = True,
    ) -> list[NewJob]:
        """The jobs to store for ``payloads``, checked; with ``seal=False`` drafts whose
        payloads are still JSON text, for a caller that finishes them (a flow) and then seals
        them with :func:`._job_seals.seal_jobs`."""
        check_queue_name(queue_name)
        if check_lifo(lifo):
            Lifo.of(runtime.backend)  # queue/lifo-unsupported before anything is stored
        priority = check_priority(priority)
        delay = check_delay(delay)
        attempts = check_max_attempts(max_attempts) or runtime.max_attempts
        classification = check_optional_str(classification, "classification")
        trace_id = check_optional_str(trace_id, "trace_id")
        group_key = check_group_key(group_key, runtime)
        caps = runtime.backend.capabilities
        if priority != 0 and not caps.priority:
            raise BadArgumentError(
                "queue/bad-argument",
                f"backend {runtime.name!r} (protocol {runtime.protocol!r}) has no priorities; "
                f"leave priority at 0",
            )
        if delay > 0 and not caps.delay:
            raise BadArgumentError(
                "queue/bad-argument",
                f"backend {runtime.name!r} (protocol {runtime.protocol!r}) cannot delay jobs",
            )
        fields: dict[str, Any] = dict(extra_meta or {})
        if backoff is not None:
            fields["backoff"] = parse_backoff(backoff).to_spec()
        if timeout is not None:
            fields[TIMEOUT_KEY] = check_positive_seconds(timeout, "timeout")
        add_trace_context(fields)
        now = self._clock.now()
        codec = runtime.codec
        limit = runtime.max_payload_bytes
        texts = [dumps(payload, limit) for payload in payloads]
        ids = [job_id] if job_id is not None else new_job_ids(len(payloads))
        if CONTEXT_META_KEY in fields:  # a context is sealed for its job: a meta per job
            metas = [meta_text(codec, fields, queue_name, new_id) for new_id in ids]
        else:
            metas = [meta_text(codec, fields, queue_name, "")] * len(ids)
        if seal and codec.sealed:
            places = [
                payload_place(queue_name, new_id, None, meta)
                for new_id, meta in zip(ids, metas, strict=True)
            ]
            texts = codec.seal_texts(texts, places)
        return [
            NewJob(
                id=new_id,
                queue=queue_name,
                payload=payload,
                priority=priority,
                max_attempts=attempts,
                created_at=now,
                available_at=now + delay,
                classification=classification,
                trace_id=trace_id,
                meta=meta,
                group_key=group_key,
                lifo=lifo,
            )
            for new_id, payload, meta in zip(ids, texts, metas, strict=True)
        ]

    # -- producing -------------------------------------------------------------------------
    @traced_send
    async def enqueue(
        self,
        queue_name: str,
        payload: Any,
        *,
        backend: str | None = None,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        classification: str | None = None,
        trace_id: str | None = None,
        backoff: Any = None,
        group_key: str | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        timeout: float | None = None,
        job_id: str | None = None,
        lifo: bool = False,
    ) -> str:
        """Durably hand a job over and return its id.  Returns before any worker runs it.

        ``job_id``: the job's id, chosen by the caller (1 to 128 ASCII letters, digits and
        ``-_.:@``, e.g. ``"order-42"``) instead of a generated ``"job-"`` + ULID one.  When
        the backend already holds a job with that id, in any state still stored (pending,
        delayed, inflight, parked, done, dead, cancelled), nothing is stored, that job is left
        as it is (its payload too) and its id is returned: a producer may enqueue again after
        a crash or a timeout without making a second job.  Not with ``unique_key`` (two ways
        to deduplicate: pick one).  A backend without the ``job_ids`` capability refuses with
        ``queue/job-ids-unsupported``.

        ``lifo=True``: the job goes ahead of every due job of the same priority already
        waiting (a delayed one once it is due; its retries too); see :class:`blamequeue.abc.Lifo`.
        A backend without the ``lifo`` capability refuses with ``queue/lifo-unsupported``.

        ``group_key`` puts the job in a group (a tenant, an account): consumers given
        ``group_concurrency=N`` run at most ``N`` jobs of one group at once across the fleet.

        ``unique_key``: while a job of this queue enqueued with the same key is pending
        (delayed included) or inflight, store nothing and return that job's id.  The key is
        held until that job leaves those states or ``unique_for`` seconds (``None``: no limit)
        after its enqueue, whichever comes first.  A backend without the ``unique`` capability
        refuses with ``queue/unique-unsupported``.

        ``timeout``: seconds (positive, finite) a handler may run on this job; past it the
        handler is cancelled and the attempt fails with a last error starting ``"timeout:"``
        (retried with backoff, or dead-lettered when no attempts remain).
        """
        runtime = self._runtime(backend)
        claim = unique_claim(unique_key, unique_for)
        chosen = None if job_id is None else check_chosen_id(job_id)
        if chosen is not None:
            if claim is not None:
                raise BadArgumentError(
                    "queue/bad-argument",
                    "enqueue takes job_id or unique_key, not both: a chosen id already makes "
                    "a second enqueue of it store nothing, whatever the first job's state",
                )
            JobIds.of(runtime.backend)  # queue/job-ids-unsupported before anything is stored
        jobs = self._build_jobs(
            runtime,
            queue_name,
            [payload],
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            backoff=backoff,
            group_key=group_key,
            timeout=timeout,
            job_id=chosen,
            lifo=lifo,
        )
        if chosen is not None:
            if await enqueue_chosen(runtime, jobs[0]):
                self._announce(runtime, queue_name, [chosen])
            return chosen
        if claim is not None:
            job_id = await enqueue_unique(runtime, jobs[0], claim)
            self._announce(runtime, queue_name, [job_id])
            return job_id
        return (await self._store(runtime, queue_name, jobs))[0]

    @traced_send
    async def enqueue_many(
        self,
        queue_name: str,
        payloads: Iterable[Any],
        *,
        backend: str | None = None,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        classification: str | None = None,
        trace_id: str | None = None,
        backoff: Any = None,
        group_key: str | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        timeout: float | None = None,
        job_id: str | None = None,
        lifo: bool = False,
    ) -> list[str]:
        """Enqueue every payload in one round trip (all or none); ids in the same order.

        Takes no ``unique_key`` / ``unique_for`` and no ``job_id`` (``queue/bad-argument``:
        one key or id would name every job): enqueue those jobs one by one with
        :meth:`enqueue`.  ``lifo=True`` makes every job of the list lifo (the last of them
        then leases first, as if enqueued one by one).
        """
        refuse_in_batch(unique_key, unique_for)
        refuse_chosen_in_batch(job_id, "enqueue_many")
        runtime = self._runtime(backend)
        if isinstance(payloads, str | bytes | Mapping) or not isinstance(payloads, Iterable):
            raise BadArgumentError(
                "queue/bad-argument",
                f"payloads must be a list of payloads, got {type(payloads).__name__}",
            )
        items = list(payloads)
        jobs = self._build_jobs(
            runtime,
            queue_name,
            items,
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            backoff=backoff,
            group_key=group_key,
            timeout=timeout,
            lifo=lifo,
        )
        if not jobs:
            return []
        return await self._store(runtime, queue_name, jobs)

    async def _store(
        self, runtime: BackendRuntime, queue_name: str, jobs: list[NewJob]
    ) -> list[str]:
        """Hand ``jobs`` (built by :meth:`_build_jobs`) to the backend in one call, wake this
        process's consumers of ``queue_name`` and announce the jobs; returns their ids."""
        await runtime.call("enqueue", lambda: runtime.backend.enqueue(jobs))
        ids = [job.id for job in jobs]
        self._announce(runtime, queue_name, ids)
        return ids

    def _announce(self, runtime: BackendRuntime, queue_name: str, ids: Sequence[str]) -> None:
        """Stored jobs ``ids`` of ``queue_name``: wake this process's idle consumers of it and
        raise their ``job.added`` events."""
        runtime.notify(queue_name)
        events = self._events
        if events.wants("job.added"):
            now = self._clock.now()
            for job_id in ids:
                events.emit(
                    "job.added", queue=queue_name, backend=runtime.name, at=now, job_id=job_id
                )

    @traced_send
    async def _enqueue_task(self, *, backend: str | None, **options: Any) -> str:
        """Enqueue one task job: ``enqueue`` plus the task's ``meta`` (see :mod:`._tasks`).
        ``options`` are those of :meth:`PendingDispatch._options`, and ``job_id`` when the
        scheduler gives one (its retries must not store a job twice).  The testing kit's
        ``QueueFake`` records dispatches by standing in for this method."""
        runtime = self._runtime(backend)
        chosen = options.get("chosen_id")
        if chosen is not None:
            JobIds.of(runtime.backend)  # queue/job-ids-unsupported before anything is stored
        jobs = self._build_task_jobs(runtime, options)
        if chosen is not None:
            if await enqueue_chosen(runtime, jobs[0]):
                self._announce(runtime, options["queue_name"], [chosen])
            return str(chosen)
        return (await self._store(runtime, options["queue_name"], jobs))[0]

    async def _dispatch_task(self, options: Mapping[str, Any]) -> str:
        """Enqueue the task job of a :class:`PendingDispatch`'s ``options`` (with the
        scheduler's ``job_id``, if it gave one)."""
        return await self._enqueue_task(**options)

    # -- batches (see _batches.py) ------------------------------------------------------------
    def batch(self, jobs: Iterable[Any]) -> PendingBatch:
        """A batch of task jobs (``queue.job(task, payload)`` builders or ``(task, payload)``
        pairs), to set up with ``.name()``, ``.on_queue()``, ``.allow_failures()``,
        ``.then()``, ``.catch()``, ``.finally_()``, ``.progress()`` and ``dispatch()``."""
        return PendingBatch(owner=self, jobs=to_dispatches(self, jobs))

    async def _dispatch_batch(self, spec: PendingBatch) -> Batch:
        return await create_batch(self, spec)

    def _build_task_jobs(self, runtime: BackendRuntime, options: Mapping[str, Any]) -> list[NewJob]:
        return self._build_jobs(
            runtime,
            options["queue_name"],
            [to_wire(options["payload"])],
            priority=options["priority"],
            delay=options["delay"],
            max_attempts=options["max_attempts"],
            classification=None,
            trace_id=None,
            backoff=options["backoff"],
            extra_meta=options["meta"],
            timeout=options["timeout"],
            job_id=options.get("job_id") or options.get("chosen_id"),
            lifo=options.get("lifo", False),
        )

    async def find_batch(self, batch_id: str, *, backend: str | None = None) -> Batch | None:
        """The batch ``batch_id`` as the backend holds it now, or ``None`` (pruned)."""
        runtime = self._runtime(backend)
        check_job_id(batch_id)
        return await find_batch(self, runtime, batch_id)

    async def batches(self, *, limit: int = 100, backend: str | None = None) -> list[Batch]:
        """The batches the backend holds, newest first."""
        runtime = self._runtime(backend)
        return await all_batches(self, runtime, check_page_limit(limit))

    async def cancel_batch(self, batch_id: str, *, backend: str | None = None) -> bool:
        """Cancel a batch: its jobs not started yet complete without running their handler.
        ``False`` when it was cancelled already."""
        runtime = self._runtime(backend)
        check_job_id(batch_id)
        return await cancel_batch(runtime, batch_id)

    async def add_to_batch(
        self, batch_id: str, jobs: Iterable[Any], *, backend: str | None = None
    ) -> list[str]:
        """Add jobs to a batch that has not finished; returns their ids."""
        check_job_id(batch_id)
        return await add_to_batch(self, batch_id, jobs, backend)

    async def prune_batches(self, *, older_than: float, backend: str | None = None) -> int:
        """Delete the batches that finished more than ``older_than`` seconds ago."""
        return await prune_batches(self._runtime(backend), older_than)

    # -- schedules (see _schedules.py) ---------------------------------------------------------
    def schedule(
        self,
        cron: str,
        task: Any,
        payload: Any = None,
        *,
        name: str | None = None,
        tz: str | None = None,
        overlap: Overlap = "queue",
        backend: str | None = None,
    ) -> Schedule:
        """Dispatch the registered ``task`` with ``payload`` on the ``cron`` schedule (5 or 6
        fields, macros such as ``@hourly``, or :class:`Every` helpers) in the time zone ``tz``
        (IANA name, default UTC), from every process running :meth:`run_scheduler`: each
        slot fires once across them.  ``overlap``: ``"queue"`` (default), ``"skip"`` while
        the previous run is pending or inflight, or ``"replace"`` it (cancelled).  ``name``
        keys the schedule's slots in the backend (default: task name and expression).  Bad
        cron / overlap / a duplicate name: ``queue/bad-argument``; an unregistered task:
        ``queue/unknown-job``."""
        return self._scheduler.add(
            cron, task, payload, name=name, tz=tz, overlap=overlap, backend=backend
        )

    async def run_scheduler(self) -> None:
        """Fire the declared schedules until cancelled (sleeping on the queue's clock).  Run
        it in as many processes as you like (e.g. beside each worker's consumers): each slot
        fires once across them."""
        await self._scheduler.run()

    async def run_due_schedules(self) -> list[str]:
        """Fire the slots due now, once (for a cron-driven process or a test); returns the ids
        of the jobs this call enqueued."""
        return await self._scheduler.run_due()

    async def schedules(self) -> list[ScheduleStatus]:
        """Every declared schedule with its next run and, from the backend, its last run (by
        any process) and that job's state now."""
        return await self._scheduler.status()

    async def trigger_schedule(self, name: str) -> str:
        """Dispatch the schedule ``name``'s job now, outside its slots; returns the job id."""
        return await self._scheduler.trigger(name)

    # -- pause / resume (see _pause.py) --------------------------------------------------------
    async def pause(self, queue_name: str, *, backend: str | None = None) -> bool:
        """Stop every worker of ``queue_name``, in every process sharing the backend, from
        leasing (running jobs finish; enqueues are still taken) until :meth:`resume`.  The
        flag is kept in the backend; workers in other processes see it within a second.
        Returns ``False`` when the queue was paused already.  ``queue/records-unsupported``
        on a backend without shared records (``sqs``)."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        changed = await set_paused(runtime, queue_name, True)
        if changed:
            await self._pause_changed(runtime, queue_name, "queue.paused")
        return changed

    async def resume(self, queue_name: str, *, backend: str | None = None) -> bool:
        """Let the workers of ``queue_name`` lease again; ``False`` when it was not paused."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        changed = await set_paused(runtime, queue_name, False)
        if changed:
            await self._pause_changed(runtime, queue_name, "queue.resumed")
        return changed

    async def is_paused(self, queue_name: str, *, backend: str | None = None) -> bool:
        """Whether ``queue_name`` is paused (read from the backend now)."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        RecordStore(runtime)  # refuses a backend without records
        return await is_paused(runtime, queue_name, fresh=True)

    async def _pause_changed(self, runtime: BackendRuntime, queue_name: str, name: str) -> None:
        self._events.emit(name, queue=queue_name, backend=runtime.name, at=self._clock.now())
        await self._auditor.emit(
            "system.queue." + name.split(".", 1)[1], backend=runtime.name, queue=queue_name
        )

    def watch(self, queue_name: str, *, backend: str | None = None) -> QueueWatch:
        """The events of ``queue_name`` raised in **any** process sharing the backend, from
        the moment it is entered, in order per job (SPEC §15)::

            async with queue.watch("emails") as events:
                async for event in events:
                    ...

        ``queue/watch-unsupported`` on a backend without ``queue_events`` (``sqs``).  See
        docs/events.md for what a watcher that falls behind sees."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        return QueueWatch(
            QueueEvents.of(runtime.backend), runtime.publisher, queue_name, runtime.name
        )

    # -- events (in this process; see _events.py) ---------------------------------------------
    def on(self, event: str, listener: Callable[[QueueEvent], Any] | None = None) -> Any:
        """Call ``listener(event)`` on every ``event`` raised in this process (a name of
        :data:`~blamequeue.EVENT_NAMES`, or ``"*"``).  Returns an :class:`EventSubscription`
        (``.unsubscribe()``); without ``listener``, works as a decorator.  Bound methods are
        held weakly; ``async`` listeners run in the queue's task group."""
        if listener is None:
            return lambda function: (self._events.subscribe(event, function), function)[1]
        return self._events.subscribe(event, listener)

    def once(self, event: str, listener: Callable[[QueueEvent], Any]) -> EventSubscription:
        """Like :meth:`on`, for the next ``event`` only."""
        return self._events.subscribe(event, listener, once=True)

    def off(self, event: str, listener: Callable[[QueueEvent], Any]) -> int:
        """Remove ``listener``'s subscriptions to ``event``; returns how many there were."""
        return self._events.unsubscribe(event, listener)

    def on_any(self, listener: Callable[[QueueEvent], Any]) -> EventSubscription:
        """Call ``listener`` on every event (``on("*", listener)``)."""
        return self._events.subscribe("*", listener)

    def listen(self, target: object) -> EventSubscription:
        """Subscribe every method of ``target`` marked ``@blamequeue.listens_to(...)``, held
        weakly: when ``target`` is garbage-collected its subscriptions end."""
        return self._events.subscribe_object(target)

    def notify_dead_jobs(self, notifier: DeadJobNotifier) -> DeadJobNotifier:
        """Send ``notifier``'s channels word of every job this process dead-letters (attempts
        exhausted, or a lease expired on its last attempt); see :class:`DeadJobNotifier`.
        Returns it (its ``sent`` / ``failed`` / ``dropped`` counts)."""
        if not isinstance(notifier, DeadJobNotifier):
            raise BadArgumentError(
                "queue/bad-argument",
                f"notify_dead_jobs takes a DeadJobNotifier(channels, ...), got {notifier!r}",
            )
        notifier.attach(self)
        self._notifiers.append(notifier)
        if self._started and self._tg is not None:
            self._tg.start_soon(notifier.run)
        return notifier

    def _stalled(self, runtime: BackendRuntime, stored: StoredJob, *, dead: bool) -> None:
        """``job.stalled`` for a job whose lease expired; then ``job.dead`` when that was its
        last attempt (the sweep dead-lettered it)."""
        now = self._clock.now()
        self._events.emit(
            "job.stalled",
            queue=stored.queue,
            backend=runtime.name,
            at=now,
            job_id=stored.id,
            data={"attempts": stored.attempts, "dead": dead},
        )
        if dead:
            self._events.emit(
                "job.dead",
                queue=stored.queue,
                backend=runtime.name,
                at=now,
                job_id=stored.id,
                data={"attempts": stored.attempts, "stalled": True},
            )

    # -- tasks -----------------------------------------------------------------------------
    @property
    def tasks(self) -> TaskRegistry:
        """The tasks registered on this queue; also the handler that runs them by name."""
        return self._tasks

    def register(self, target: Any) -> Any:
        """Register a :class:`~blamequeue.Task` subclass (or a ``@blamequeue.task``
        function); returns it, so it also works as a class decorator."""
        return self._tasks.register(target)

    @overload
    def task(self, function: Callable[[P, Any], R], /) -> FunctionTask[P, R]: ...

    @overload
    def task(
        self,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        tries: int | None = None,
        timeout: float | None = None,
        backoff: BackoffOption | None = None,
        priority: int = 0,
        payload_type: type | None = None,
    ) -> Callable[[Callable[[P, Any], R]], FunctionTask[P, R]]: ...

    def task(self, function: Any = None, /, **declared: Any) -> Any:
        """Declare and register a task from a handler function ``(payload, ctx)``::

        @queue.task(queue="emails", tries=5, timeout=30, backoff=[10, 30, 60])
        async def send_welcome_email(payload: Welcome, ctx: JobContext) -> None: ...

        await send_welcome_email.dispatch(Welcome(email="ada@example.com"))
        """
        declare = declare_task(**declared)
        if function is not None:
            return self._tasks.register(declare(function))
        return lambda target: self._tasks.register(declare(target))

    @overload
    def job(self, task: type[Task[P]] | FunctionTask[P, Any], payload: P) -> PendingDispatch: ...

    @overload
    def job(self, task: str, payload: Any = None) -> PendingDispatch: ...

    def job(self, task: Any, payload: Any = None) -> PendingDispatch:
        """A fluent builder for one task job; ``task`` is a registered name or the task
        itself.  An unknown name is refused here (``queue/unknown-job``)::

            await queue.job("SendWelcomeEmail", payload).on_queue("emails").delay(60).dispatch()
        """
        if isinstance(task, FunctionTask):
            name = task.settings.name
        elif isinstance(task, type) and issubclass(task, Task):
            name = task.settings().name
        else:
            name = task
        entry = self._tasks.get(name)
        return PendingDispatch(registry=self._tasks, settings=entry.settings, payload=payload)

    @traced_send
    async def enqueue_flow(
        self,
        queue_name: str,
        children: Sequence[FlowChild | Mapping[str, Any]],
        *,
        backend: str | None = None,
    ) -> FlowResult:
        """Register a graph of jobs atomically (all or none) and return their ids.

        Each child is a :class:`FlowChild` or a mapping with its keys.  Children without
        ``depends_on`` are due at once; the others wait ``parked`` until every sibling they name
        is done, then become due together.  A child's ``queue_name`` puts it on another queue
        of the same backend (``queue/flow-unsupported`` on a backend without the
        ``cross_queue_flows`` capability); its ``on_dependency_failure`` says what it does when
        a sibling it waits for ends dead or cancelled: ``"wait"`` (stay parked),
        ``"fail"`` (dead-lettered at once, naming that sibling), ``"ignore"`` (go on as if
        it were done); ``queue/flow-unsupported`` without the ``flow_policies`` capability.
        The whole specification is checked before anything is stored (``queue/bad-flow``,
        ``queue/flow-unknown-dep``, ``queue/flow-cycle``, and ``enqueue``'s own checks for
        each child); a backend that cannot release parked jobs refuses with
        ``queue/flow-unsupported``.  ``FlowResult.jobs`` follows declaration order.
        """
        runtime = self._flow_runtime(backend)
        try:
            check_queue_name(queue_name)
        except BadArgumentError as exc:
            raise FlowError("queue/bad-flow", exc.message) from exc

        def build(child: FlowChild) -> NewJob:
            [job] = self._build_jobs(
                runtime,
                queue_name if child.queue_name is None else child.queue_name,
                [child.payload],
                priority=child.priority,
                delay=0.0,
                max_attempts=child.max_attempts,
                classification=child.classification,
                trace_id=child.trace_id,
                backoff=None,
                seal=False,
            )
            return job

        plan = plan_flow(children, build)
        if any(job.queue != queue_name for job in plan.jobs):
            CrossQueueFlows.of(runtime.backend)
        if any(job.on_dependency_failure != "wait" for job in plan.jobs):
            FlowPolicies.of(runtime.backend)
        plan = attrs.evolve(plan, jobs=seal_jobs(runtime.codec, plan.jobs))
        await runtime.call("enqueue", lambda: runtime.backend.enqueue(plan.jobs))
        for queue in dict.fromkeys(job.queue for job in plan.jobs):
            self._announce(runtime, queue, [job.id for job in plan.jobs if job.queue == queue])
        await self._auditor.emit(
            "system.queue.flow.register",
            backend=runtime.name,
            queue=queue_name,
            data={"flow_id": plan.flow_id, "jobs": len(plan.jobs)},
        )
        return FlowResult(
            flow_id=plan.flow_id,
            jobs=[
                FlowJob(name=name, job_id=job.id)
                for name, job in zip(plan.names, plan.jobs, strict=True)
            ],
        )

    async def flow_status(self, flow_id: str, *, backend: str | None = None) -> FlowStatus:
        """The state of each child of a flow that is still stored.

        A ``done`` child is kept for the backend's ``retain_done`` seconds, then pruned: a child
        missing from the answer has finished (or was purged).  A flow id the backend holds no
        child of (never registered, or every child pruned) raises ``queue/job-not-found``.
        """
        runtime = self._flow_runtime(backend)
        if not isinstance(flow_id, str) or not flow_id:
            raise BadArgumentError(
                "queue/bad-argument", f"flow_id must be a non-empty string, got {flow_id!r}"
            )
        rows = await runtime.call("flow_jobs", lambda: Flows.of(runtime.backend).flow_jobs(flow_id))
        if not rows:
            raise NotFoundError(
                "queue/job-not-found",
                f"backend {runtime.name!r} holds no job of flow {flow_id!r}: the flow id is "
                f"unknown, or every child finished and was pruned after retain_done",
            )
        return FlowStatus(
            flow_id=flow_id,
            children=[
                FlowChildStatus(name=flow_name(row.meta) or row.id, job_id=row.id, state=row.state)
                for row in rows
            ],
        )

    # -- consuming -------------------------------------------------------------------------
    async def consume(
        self,
        queue_name: str,
        handler: Handler,
        *,
        backend: str | None = None,
        concurrency: int = 1,
        lease: float = 30.0,
        poll_interval: float = 1.0,
        fast_poll: float = 0.05,
        rate_limit: RateLimit | Mapping[str, Any] | None = None,
        heartbeat: bool = True,
        global_rate_limit: RateLimit | Mapping[str, Any] | None = None,
        group_concurrency: int | None = None,
        backoff: BackoffOption | None = None,
    ) -> Consumer:
        """Start a resident consumer in the queue's task group and return its handle.

        ``backoff`` (a strategy, a list of delays, a spec mapping, or a function
        ``(attempt, error) -> seconds``) sets the retry delay of the jobs this consumer runs
        that have no backoff of their own or of their task; else the backend's applies.

        ``rate_limit`` caps this consumer's own handler starts.  ``global_rate_limit`` caps
        the leases of every consumer of the queue together (a token bucket kept in the
        backend), and ``group_concurrency=N`` lets at most ``N`` jobs of one ``group_key`` be
        in flight across the fleet; give every consumer of the queue the same values (see
        the concepts page, "Fleet-wide limits").
        """
        runtime = self._runtime(backend)
        limits = parse_lease_limits(runtime, global_rate_limit, group_concurrency)
        consumer = Consumer(
            runtime=runtime,
            queue_name=check_queue_name(queue_name),
            handler=check_callable(handler),
            concurrency=check_positive_int(concurrency, "concurrency"),
            lease=check_positive_seconds(lease, "lease"),
            poll_interval=check_positive_seconds(poll_interval, "poll_interval"),
            fast_poll=check_delay(fast_poll, "fast_poll"),
            rate_limit=RateLimit.coerce(rate_limit),
            heartbeat=bool(heartbeat),
            limits=limits,
            backoff=parse_backoff_option(backoff),
        )
        assert self._tg is not None
        self._consumers = [c for c in self._consumers if not c.stopped]
        self._consumers.append(consumer)
        await self._tg.start(consumer.run)
        return consumer

    async def tick(
        self,
        queue_name: str,
        handler: Handler,
        *,
        max: int = 10,
        lease: float = 30.0,
        concurrency: int = 1,
        backend: str | None = None,
        global_rate_limit: RateLimit | Mapping[str, Any] | None = None,
        group_concurrency: int | None = None,
        backoff: BackoffOption | None = None,
    ) -> TickResult:
        """Sweep once, run at most ``max`` due jobs, settle them and return the counts.

        ``global_rate_limit`` and ``group_concurrency`` limit the batch as they limit
        :meth:`consume` (shared with every consumer and tick of the queue), and ``backoff``
        is the retry delay of its jobs as :meth:`consume`'s is.  While a ``RateLimited``
        pause of the queue lasts, a tick leases nothing.
        """
        runtime = self._runtime(backend)
        limits = parse_lease_limits(runtime, global_rate_limit, group_concurrency)
        check_queue_name(queue_name)
        check_callable(handler)
        max_jobs = check_positive_int(max, "max")
        lease = check_positive_seconds(lease, "lease")
        concurrency = check_positive_int(concurrency, "concurrency")
        worker_backoff = parse_backoff_option(backoff)
        await self._sweep_runtime(runtime)
        if await is_paused(runtime, queue_name, fresh=True):
            return TickResult(may_have_more=False, queue_depth=None)
        if await rate_limited_until(runtime, queue_name, fresh=True) is not None:
            return TickResult(may_have_more=False, queue_depth=None)
        result = await run_tick(
            runtime,
            queue_name,
            handler,
            max_jobs=max_jobs,
            lease=lease,
            concurrency=concurrency,
            limits=limits,
            backoff=worker_backoff,
        )
        # A tick may be all a short-lived process does: its figures must not wait for a timer.
        await self._flush_metrics(runtime)
        return result

    # -- sweeping --------------------------------------------------------------------------
    async def _sweep_runtime(self, runtime: BackendRuntime) -> int:
        result = await runtime.call(
            "sweep",
            lambda: runtime.backend.sweep(
                now=self._clock.now(),
                retain_done=runtime.retain_done,
                expired_error=LEASE_EXPIRED,
            ),
        )
        await prune_finished(runtime)
        # One lease.expired event per job when the backend names them (SweepResult.expired),
        # else one event with the count.
        for stored in result.expired:
            await self._emit_lease_expired(runtime, stored, "pending")
            self._stalled(runtime, stored, dead=False)
        for stored in result.dead:
            if stored.flow_id is not None:  # children that ignore it may have been released
                runtime.notify_flow(stored)
            await self._emit_lease_expired(runtime, stored, "dead")
            await emit_dead(runtime, stored, LEASE_EXPIRED)
            await audit_failed_dependants(runtime, stored, stored.finished_at or self._clock.now())
            self._stalled(runtime, stored, dead=True)
        unnamed = result.repended - len(result.expired)
        if unnamed > 0:
            await self._auditor.emit(
                "system.queue.lease.expired",
                backend=runtime.name,
                data={"repended": unnamed, "dead_lettered": len(result.dead)},
            )
        if result.repended or result.dead:
            # Their workers stopped answering (crashed, hung, cut off): worth an operator's look.
            named = [*result.expired, *result.dead]
            log.warning(
                "backend %r: %d expired lease(s) recovered (%d back to pending, %d dead-lettered)",
                runtime.name,
                result.repended + len(result.dead),
                result.repended,
                len(result.dead),
                extra=jobs_extra(
                    runtime.name,
                    [stored.id for stored in named],
                    [stored.queue for stored in named],
                    count=result.repended + len(result.dead),
                ),
            )
        if result.repended:
            # Jobs are due again: wake this process's idle consumers.
            for consumer in self._consumers:
                if consumer.backend == runtime.name:
                    runtime.notify(consumer.queue_name)
        return result.repended + len(result.dead)

    async def _emit_lease_expired(
        self, runtime: BackendRuntime, stored: StoredJob, outcome: str
    ) -> None:
        await self._auditor.emit_job(
            "system.queue.lease.expired",
            stored,
            backend=runtime.name,
            data={"attempts": stored.attempts, "outcome": outcome},
        )

    async def sweep(self, *, backend: str | None = None) -> int:
        """Recover expired leases now (on ``backend``, or on every backend); return how many."""
        if backend is not None:
            return await self._sweep_runtime(self._runtime(backend))
        self._runtime(None)  # raises when not started
        total = 0
        for runtime in self._runtimes.values():
            total += await self._sweep_runtime(runtime)
        return total

    async def _sweep_loop(self) -> None:
        while True:
            await self._clock.sleep(self._sweep_interval)
            for runtime in self._runtimes.values():
                try:
                    await self._sweep_runtime(runtime)
                except QueueError as exc:
                    log.warning("sweep of backend %r failed: %s", runtime.name, exc)

    async def _metrics_loop(self) -> None:
        while True:
            await self._clock.sleep(FLUSH_INTERVAL)
            for runtime in self._runtimes.values():
                await self._flush_metrics(runtime)

    @staticmethod
    async def _flush_metrics(runtime: BackendRuntime) -> None:
        try:
            await flush_metrics(runtime)
        except QueueError as exc:
            # Figures are advisory: a backend refusing them must not disturb the jobs.
            log.warning("metrics of backend %r not written: %s", runtime.name, exc)

    # -- inspecting and operating ----------------------------------------------------------
    async def size(self, queue_name: str, *, backend: str | None = None) -> int:
        """Pending + inflight jobs (delayed included), excluding done and dead."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        return await runtime.call("size", lambda: runtime.backend.size(queue_name))

    async def purge(self, queue_name: str, *, backend: str | None = None) -> int:
        """Delete every live job of the queue (and its done rows); the DLQ is untouched."""
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        count = await runtime.call("purge", lambda: runtime.backend.purge(queue_name))
        await self._auditor.emit(
            "system.queue.purge", backend=runtime.name, queue=queue_name, data={"deleted": count}
        )
        return count

    async def dlq_list(
        self, queue_name: str, *, backend: str | None = None, limit: int | None = None
    ) -> list[DeadLetter]:
        runtime = self._dlq_runtime(backend)
        check_queue_name(queue_name)
        if limit is not None:
            check_positive_int(limit, "limit")
        rows = await runtime.call(
            "dlq_list", lambda: DeadLetters.of(runtime.backend).dlq_list(queue_name, limit=limit)
        )
        return [to_dead_letter(runtime, row) for row in rows]

    async def dlq_retry(self, job_id: str, *, backend: str | None = None) -> bool:
        """Put one dead job back to pending with its attempts reset.  False if not found."""
        runtime = self._dlq_runtime(backend)
        if not isinstance(job_id, str) or not job_id:
            raise BadArgumentError(
                "queue/bad-argument", f"job_id must be a non-empty string, got {job_id!r}"
            )
        stored = await self._retry_dead(runtime, job_id)
        if stored is None:
            return False
        runtime.notify(stored.queue)
        return True

    async def dlq_retry_all(self, queue_name: str, *, backend: str | None = None) -> int:
        """Put every dead job of ``queue_name`` back to pending with its attempts reset, as
        :meth:`dlq_retry` does for one (each move atomic in the backend, and audited); returns
        how many.  A job that dies again while this runs is not retried a second time."""
        runtime = self._dlq_runtime(backend)
        check_queue_name(queue_name)
        dead_letters = DeadLetters.of(runtime.backend)
        seen: set[str] = set()
        retried = 0
        while True:
            # Most recently failed first: ask past the ones already retried (a job that died
            # again comes first), and stop when the list ends or holds nothing new.
            limit = len(seen) + _RETRY_ALL_PAGE
            page = await runtime.call(
                "dlq_list", functools.partial(dead_letters.dlq_list, queue_name, limit=limit)
            )
            fresh = [job.id for job in page if job.id not in seen]
            seen.update(fresh)
            for job_id in fresh:
                if await self._retry_dead(runtime, job_id) is not None:
                    retried += 1
            if fresh:
                runtime.notify(queue_name)
            if len(page) < limit or not fresh:
                return retried

    async def _retry_dead(self, runtime: BackendRuntime, job_id: str) -> StoredJob | None:
        """One dead job back to pending (attempts reset), audited; ``None`` if none has that
        id."""
        stored = await runtime.call(
            "dlq_retry",
            lambda: DeadLetters.of(runtime.backend).dlq_retry(job_id, now=self._clock.now()),
        )
        if stored is not None:
            await self._auditor.emit_job("system.queue.dlq.retry", stored, backend=runtime.name)
        return stored

    async def cancel(self, job_id: str, *, backend: str | None = None) -> bool:
        """Cancel the job ``job_id``: it ends in the terminal state ``cancelled``.

        A pending (also delayed or parked) job is removed from the queue at once.  A running
        one is ``cancelled`` at once too, and its lease fenced; the worker running it learns
        of it at its next heartbeat (every ``lease / 3`` seconds) and cancels the handler (a
        plain ``def`` handler is abandoned in its thread).  A handler that finishes before
        its worker hears of it changes nothing: the job stays ``cancelled`` (its side effects
        may have happened).  Cancelled jobs are kept and pruned like ``done`` ones
        (``retain_done``); flow children waiting on a cancelled job are treated as behind a
        dead one: they stay ``parked``, or follow their ``on_dependency_failure``.

        Returns True when this call cancelled the job, False when it had already finished
        (done, dead or cancelled).  An unknown id raises ``queue/job-not-found``; a backend
        that cannot cancel by id (``sqs``) raises ``queue/cancel-unsupported``.  Audit event
        ``system.job.cancelled``.
        """
        return await cancel_job(self._runtime(backend), job_id)

    # -- job control (SPEC §15, see _job_edits.py) -------------------------------------------
    async def promote(self, job_id: str, *, backend: str | None = None) -> bool:
        """Make the delayed job ``job_id`` due now; an idle consumer starts it at once.

        Returns True when it moved, False when the job was already due, ``parked``, running
        or finished (nothing changed).  An unknown id raises ``queue/job-not-found``; a backend
        that cannot edit jobs (``sqs``) ``queue/job-edits-unsupported``.  Audit event
        ``system.job.promoted``.
        """
        return await promote(self._runtime(backend), job_id)

    async def change_delay(
        self, job_id: str, seconds: float, *, backend: str | None = None
    ) -> bool:
        """Make the pending (due or delayed) job ``job_id`` due ``seconds`` from now (0: at
        once); an idle consumer waits for the new time, sooner or later than the old one.

        ``seconds`` is checked as ``enqueue``'s ``delay`` (``queue/bad-argument``).  Returns
        False when the job is ``parked`` (it waits for its dependencies), running or finished.
        Unknown id: ``queue/job-not-found``.  Audit event ``system.job.delay.changed``.
        """
        return await change_delay(self._runtime(backend), job_id, seconds)

    async def change_priority(
        self, job_id: str, priority: int, *, backend: str | None = None
    ) -> bool:
        """Give the pending (due, delayed) or ``parked`` job ``job_id`` the priority
        ``priority`` (an int as ``enqueue`` takes it, else ``queue/bad-argument``); leasing
        order follows it from the next lease on.

        Returns False when the job is running or finished.  Unknown id:
        ``queue/job-not-found``.  Audit event ``system.job.priority.changed``.
        """
        return await change_priority(self._runtime(backend), job_id, priority)

    async def update_payload(
        self, job_id: str, payload: Any, *, backend: str | None = None
    ) -> bool:
        """Replace the payload of the pending (due, delayed) or ``parked`` job ``job_id``; its
        handler sees the new one.

        The payload is checked as ``enqueue`` checks it (``queue/bad-payload``,
        ``queue/payload-too-large``, nothing changed) and sealed for its job, as at enqueue.
        Returns False when the job is running or finished.  Unknown id:
        ``queue/job-not-found``.  Audit event ``system.job.payload.updated`` (never the
        payload).
        """
        return await update_payload(self._runtime(backend), job_id, payload)

    async def rerun(self, job_id: str, *, backend: str | None = None) -> bool:
        """Run the ``done``, ``dead`` or ``cancelled`` job ``job_id`` again: back to pending,
        due now, with its attempts reset, as ``dlq_retry`` does for a dead one (its result and
        unique key dropped, its last error kept).

        Returns False when the job is pending, ``parked`` or running.  Unknown id (or a done
        job pruned after ``retain_done``): ``queue/job-not-found``.  Audited as
        ``system.queue.dlq.retry`` for a dead job, ``system.job.rerun`` (``data["from"]``: the
        state it left) for the others.
        """
        return await rerun(self._runtime(backend), job_id)

    async def dlq_size(self, queue_name: str, *, backend: str | None = None) -> int:
        runtime = self._dlq_runtime(backend)
        check_queue_name(queue_name)
        return await runtime.call(
            "dlq_size", lambda: DeadLetters.of(runtime.backend).dlq_size(queue_name)
        )

    async def dlq_purge(self, queue_name: str, *, backend: str | None = None) -> int:
        runtime = self._dlq_runtime(backend)
        check_queue_name(queue_name)
        count = await runtime.call(
            "dlq_purge", lambda: DeadLetters.of(runtime.backend).dlq_purge(queue_name)
        )
        await self._auditor.emit(
            "system.queue.dlq.purge",
            backend=runtime.name,
            queue=queue_name,
            data={"deleted": count},
        )
        return count

    # -- inspection --------------------------------------------------------------------------
    async def get_job(self, job_id: str, *, backend: str | None = None) -> Job | None:
        """The job with ``job_id`` in any state, or ``None`` when the backend holds none (never
        enqueued, purged, or done and pruned after ``retain_done``).

        Its state is in :meth:`job_info`.  A payload that cannot be unsealed raises
        ``queue/unseal-failed`` (``job_info`` shows such a job anyway).
        """
        runtime = self._runtime(backend)
        check_job_id(job_id)
        stored = await runtime.call(
            "get_job", lambda: Inspection.of(runtime.backend).get_job(job_id)
        )
        return None if stored is None else to_job(runtime, stored)

    async def job_info(self, job_id: str, *, backend: str | None = None) -> JobInfo | None:
        """The job with ``job_id`` and its state (:class:`JobInfo`), or ``None``."""
        runtime = self._runtime(backend)
        check_job_id(job_id)
        stored = await runtime.call(
            "get_job", lambda: Inspection.of(runtime.backend).get_job(job_id)
        )
        if stored is None:
            return None
        [progress] = await last_progress(runtime, [stored])
        return to_job_info(runtime, stored, progress)

    async def job_logs(self, job_id: str, *, backend: str | None = None) -> list[JobLogLine]:
        """The log of the job with ``job_id``: the lines its handler wrote with
        :meth:`JobContext.log <blamequeue.JobContext.log>`, oldest first (at most the last
        1,000), each with its time and the attempt that wrote it; ``[]`` for a job that wrote
        none.  ``queue/job-not-found`` when the backend holds no such job (pruned after
        ``retain_done``, purged, or unknown); ``queue/records-unsupported`` on a backend that
        keeps no records (``sqs``)."""
        runtime = self._runtime(backend)
        check_job_id(job_id)
        self.records(backend)  # refuses a backend without records before anything is read
        stored = await runtime.call(
            "get_job", lambda: Inspection.of(runtime.backend).get_job(job_id)
        )
        if stored is None:
            raise not_found(runtime, job_id)
        return await read_logs(runtime, stored)

    async def list_jobs(
        self,
        queue_name: str,
        *,
        state: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        backend: str | None = None,
    ) -> JobPage:
        """One page of the queue's jobs, by state (pending, inflight, parked, done, dead,
        cancelled) then enqueue order; ``state`` keeps one state only.

        Pass ``page.next_cursor`` as ``cursor`` for the next page (``None``: last page).  A
        job that changes state between two pages may be missed or seen twice.  ``state`` not
        a state, ``limit`` outside 1..1000, or a cursor this backend did not hand out →
        ``queue/bad-argument``.
        """
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        wanted = check_state(state)
        limit = check_page_limit(limit)
        cursor = check_cursor(cursor)
        page = await runtime.call(
            "list_jobs",
            lambda: Inspection.of(runtime.backend).list_jobs(
                queue_name, state=wanted, limit=limit, cursor=cursor
            ),
        )
        progress = await last_progress(runtime, page.jobs)
        return JobPage(
            jobs=[
                to_job_info(runtime, stored, last)
                for stored, last in zip(page.jobs, progress, strict=True)
            ],
            next_cursor=page.next_cursor,
        )

    async def queues(self, *, backend: str | None = None) -> list[QueueInfo]:
        """Every queue of the backend that holds jobs, by name, with its count per state."""
        runtime = self._runtime(backend)
        counts = await runtime.call("queue_counts", Inspection.of(runtime.backend).queue_counts)
        return [to_queue_info(runtime.name, name, counts[name]) for name in sorted(counts)]

    async def metrics(
        self, queue_name: str, *, window: float = 3600.0, backend: str | None = None
    ) -> QueueMetrics:
        """The figures of ``queue_name`` over the last ``window`` seconds (60 s to 24 h), as
        every process sharing the backend recorded them: per minute, succeeded / failed /
        dead attempts and their mean duration; totals, throughput per minute, error rate and
        the latest errors (:class:`QueueMetrics`).  Workers flush their figures once a
        second; this process's are flushed first.  ``queue/records-unsupported`` on a
        backend without shared records (``sqs``).
        """
        runtime = self._runtime(backend)
        check_queue_name(queue_name)
        seconds = check_window(window)
        RecordStore(runtime)  # refuses a backend without records before anything else
        return await read_metrics(runtime, queue_name, seconds)

    async def health(
        self, thresholds: HealthThresholds | None = None, *, backend: str | None = None
    ) -> HealthReport:
        """Check every backend (or only ``backend``): breakers, each queue's due, delayed,
        inflight and dead jobs, the oldest due job's wait, the error rate (from the
        backend-kept metrics) and live workers, against ``thresholds`` (defaults:
        :class:`HealthThresholds`).  ``report.status`` is ``"healthy"``, ``"degraded"`` (a
        warning) or ``"unhealthy"`` (a critical alert, e.g. a backend that cannot be
        reached); ``report.http_status`` maps it to 200 / 207 / 503 (:func:`health_app`
        serves it over HTTP).  Backends without inspection (``sqs``) report their breaker
        only.
        """
        if thresholds is not None and not isinstance(thresholds, HealthThresholds):
            raise BadArgumentError(
                "queue/bad-argument",
                f"thresholds must be a HealthThresholds (or None for the defaults), got "
                f"{thresholds!r}",
            )
        runtimes = (
            [self._runtime(backend)]
            if backend is not None
            else [
                self._runtime(None),
                *(r for n, r in self._runtimes.items() if n != self._default),
            ]
        )
        return await check_report(runtimes, thresholds or HealthThresholds(), self._clock.now())

    async def workers(self, *, backend: str | None = None) -> list[WorkerInfo]:
        """The live consumers of the backend, from any process: each registers itself when it
        starts and heartbeats every few seconds; one silent for 15 s is not live."""
        runtime = self._runtime(backend)
        alive_since = self._clock.now() - LIVE_FOR
        records = await runtime.call(
            "list_workers",
            lambda: Inspection.of(runtime.backend).list_workers(alive_since=alive_since),
        )
        return [to_worker_info(runtime.name, record) for record in records]

    # -- results and progress (SPEC §10) -----------------------------------------------------
    async def result(
        self, job_id: str, *, timeout: float | None = None, backend: str | None = None
    ) -> Any:
        """Wait for the job ``job_id`` to end and return its handler's return value.

        Returns at once for a job already ``done`` (while the backend retains it,
        ``retain_done``); otherwise waits, at most ``timeout`` seconds of the queue's clock
        (``None``: no limit).  Raises ``queue/job-failed`` (:class:`~blamequeue.errors.
        JobFailedError`, quoting the last error) for a job that ended in any other state
        (``dead``, ``cancelled``), ``queue/result-timeout`` when the time runs out,
        ``queue/job-not-found`` for an id the backend does not hold, ``queue/bad-payload``
        when the handler returned a value JSON cannot hold (the job completed anyway), and
        ``queue/results-unsupported`` on a backend that keeps no results (``sqs``).
        """
        runtime = self._runtime(backend)
        check_job_id(job_id)
        seconds = check_timeout(timeout)
        require_results(runtime, "return job results")
        return await wait_for_result(runtime, job_id, seconds)

    def subscribe(
        self, job_id: str, *, timeout: float | None = None, backend: str | None = None
    ) -> Subscription:
        """Live events of the job ``job_id``, from whichever process runs it::

            async with queue.subscribe(job_id) as events:
                async for event in events:  # JobEvent
                    print(event.kind, event.percent, event.data)

        Yields a ``progress`` event per ``ctx.progress(...)`` published after subscribing
        (events are not stored: earlier ones are gone), then one ``finished`` event when the
        job ends (at once if it already has), and stops.  Entering raises
        ``queue/job-not-found`` for an unknown id; iterating raises ``queue/result-timeout``
        once ``timeout`` seconds of the queue's clock pass (``None``: no limit).  Backends
        without ``progress_events`` (``sqs``) refuse with ``queue/results-unsupported``.
        """
        runtime = self._runtime(backend)
        check_job_id(job_id)
        return Subscription(runtime, job_id, check_timeout(timeout))

    def list_backends(self) -> list[BackendStatus]:
        if not self._started:
            raise QueueError(
                "queue/not-initialized",
                "list_backends() needs a started queue; use `async with queue:` first",
            )
        out = []
        for runtime in self._runtimes.values():
            state: BreakerState = runtime.guard.breaker.state  # type: ignore[assignment]
            out.append(
                BackendStatus(name=runtime.name, protocol=runtime.protocol, breaker_state=state)
            )
        return out
