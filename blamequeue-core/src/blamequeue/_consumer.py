"""The resident consume loop.

One loop per consumer leases at most as many jobs as it has free slots (never more than
``concurrency`` leases held, so several workers share a backlog fairly), starts a task per job,
settles finished jobs in batches (group commit: whatever finished while the previous batch was
being written goes in the next one), and renews the leases of running handlers every
``lease / 3`` seconds.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import attrs

from ._backoff import Backoff, BackoffFunction
from ._cancellation import stop_cancelled
from ._clock import SystemClock
from ._execution import Attempt, Handler, SettleCounts, release, run_attempt, settle
from ._job_logging import jobs_extra
from ._limits import lease_call
from ._models import RateLimit
from ._pause import PAUSE_CHECK, is_paused
from ._presence import Presence
from ._rate_limited import rate_limited_until
from ._runtime import BackendRuntime
from ._validation import check_positive_int
from .abc import Lease, LeaseLimits, NextDue, OverlappedLease, WaitAndLease
from .errors import QueueError

__all__ = ["Consumer", "ConsumerStats"]

log = logging.getLogger("blamequeue")

_MAX_ERROR_BACKOFF = 30.0


@attrs.define
class ConsumerStats(SettleCounts):
    """Running totals of one consumer: the settlement counts, plus jobs leased."""

    leased: int = 0

    def add(self, counts: SettleCounts) -> None:
        for field in attrs.fields(SettleCounts):
            setattr(self, field.name, getattr(self, field.name) + getattr(counts, field.name))


class Consumer:
    """A running consumer of one queue.  Made by :meth:`Queue.consume`."""

    def __init__(
        self,
        *,
        runtime: BackendRuntime,
        queue_name: str,
        handler: Handler,
        concurrency: int,
        lease: float,
        poll_interval: float,
        fast_poll: float,
        rate_limit: RateLimit | None,
        heartbeat: bool,
        limits: LeaseLimits | None = None,
        backoff: Backoff | BackoffFunction | None = None,
    ) -> None:
        self.queue_name = queue_name
        self._backoff = backoff
        self.backend = runtime.name
        self._concurrency = concurrency
        self.lease = lease
        self.stats = ConsumerStats()
        self._runtime = runtime
        self._handler = handler
        self._poll_interval = poll_interval
        self._fast_poll = fast_poll
        self._rate_limit = rate_limit
        self._heartbeat = heartbeat
        self._limits = limits
        # A lease the fleet's rate limit cut short comes back empty; ask again once the
        # bucket has refilled, not a whole poll interval later.
        self._empty_wait = poll_interval
        if limits is not None and limits.rate_per_seconds is not None:
            self._empty_wait = min(poll_interval, limits.rate_per_seconds)
        # Where it pays (Backend.overlapped_lease), lease in halves of the concurrency: while
        # handlers run one half, the next lease and the previous half's settlement are on
        # their way, so the server works while this process does (else the two take turns).
        backend = runtime.backend
        self._overlapped = isinstance(backend, OverlappedLease) and backend.overlapped_lease
        self._lease_chunk = self._chunk_of(concurrency)
        self._workers = 0
        self._pool: anyio.abc.TaskGroup | None = None
        self._held = 0
        self._running: dict[str, tuple[Attempt, anyio.CancelScope]] = {}
        self._to_settle: list[Attempt] = []
        self._settle_wanted = anyio.Event()
        self._capacity_changed = anyio.Event()
        self._starts: deque[float] = deque()
        self._ready: deque[Attempt] = deque()
        self._ready_event = anyio.Event()
        self._taken = anyio.Event()  # set when the workers took every job handed to them
        self._lease_scope: anyio.CancelScope | None = None
        self._cancelled = False
        self._aborting = False
        self._stopped = anyio.Event()
        self._lease_errors = 0
        self._presence = Presence(runtime, self)

    # -- public ---------------------------------------------------------------------------
    @property
    def concurrency(self) -> int:
        """The most handlers this consumer runs (and leases it holds) at once.  Settable while
        it runs: a larger value leases more at its next lease; a smaller one lets the running
        handlers finish and leases no more until fewer than the new value are held."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        value = check_positive_int(value, "concurrency")
        self._concurrency = value
        self._lease_chunk = self._chunk_of(value)
        if self._pool is not None:
            for _ in range(value - self._workers):
                self._workers += 1
                self._pool.start_soon(self._worker)
        # Idle workers look whether they are still wanted; the lease loop, whether it may lease.
        self._ready_event.set()
        self._ready_event = anyio.Event()
        self._capacity_changed.set()
        self._capacity_changed = anyio.Event()

    def _chunk_of(self, concurrency: int) -> int:
        """How many jobs one lease asks for at most: where it pays
        (:class:`~blamequeue.abc.OverlappedLease`), half the concurrency, so the next lease is
        on its way while the handlers of the last one run."""
        return max(1, (concurrency + 1) // 2) if self._overlapped else concurrency

    @property
    def id(self) -> str:
        """This consumer's id in the backend's worker registry (``Queue.workers``)."""
        return self._presence.id

    def cancel(self) -> None:
        """Stop leasing now.  Handlers already running finish on their own and are settled."""
        self._cancelled = True
        if self._lease_scope is not None:
            self._lease_scope.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def stopped(self) -> bool:
        """True once the loop has ended and everything it leased is settled."""
        return self._stopped.is_set()

    @property
    def in_flight(self) -> int:
        """Handlers running right now."""
        return len(self._running)

    @property
    def held(self) -> int:
        """Leases held: running handlers plus finished ones not yet settled."""
        return self._held

    async def wait_stopped(self) -> None:
        """Wait until the consumer has stopped and settled everything it leased."""
        await self._stopped.wait()

    # -- used by Queue.shutdown ----------------------------------------------------------------
    def abort(self) -> None:
        """Stop leasing and cancel running handlers now; their jobs are released back to
        pending at once with the interrupted attempt given back.  ``Queue.shutdown`` does this
        to the handlers still running at its deadline."""
        self.cancel()
        self._aborting = True
        for _attempt, scope in list(self._running.values()):
            scope.cancel()

    # -- the loop -------------------------------------------------------------------------------
    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            # Registered before consume() returns, so Queue.workers() lists it at once.
            await self._presence.beat()
            self._worker_event("worker.started")
            # A fixed pool of `concurrency` workers takes leased jobs from a deque: spawning a
            # task per job, or a stream receive per job, costs more than a no-op handler does.
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._settle_loop)
                tg.start_soon(self._presence.run)
                if self._heartbeat:
                    tg.start_soon(self._heartbeat_loop)
                self._pool = tg
                for _ in range(self._concurrency):
                    self._workers += 1
                    tg.start_soon(self._worker)
                with anyio.CancelScope() as scope:
                    self._lease_scope = scope
                    if self._cancelled:
                        scope.cancel()
                    task_status.started()
                    await self._lease_loop()
                while self._held > 0:
                    await self._capacity_changed.wait()
                tg.cancel_scope.cancel()
        except Exception:
            # Surfaces at shutdown too, but an operator must hear of it now.
            log.exception("consumer of %r on backend %r crashed", self.queue_name, self.backend)
            raise
        finally:
            self._cancelled = True
            try:
                await self._presence.leave()
            finally:
                self._stopped.set()
                self._worker_event("worker.stopped")

    def _worker_event(self, name: str) -> None:
        runtime = self._runtime
        runtime.events.emit(
            name,
            queue=self.queue_name,
            backend=runtime.name,
            at=runtime.clock.now(),
            data={"worker_id": self.id, "concurrency": self.concurrency, **self.stats_dict()},
        )

    def stats_dict(self) -> dict[str, int]:
        return attrs.asdict(self.stats)

    async def _worker(self) -> None:
        ready = self._ready
        while True:
            # One cancel scope for the jobs this worker runs one after another (one per job
            # cost more than a no-op handler's run).  Only the job running in it can cancel it
            # (through _running); once that happened the scope is spent, so a new one is opened
            # for the next job, whether the cancellation ended the handler or it swallowed it.
            with anyio.CancelScope() as scope:
                while not scope.cancel_called:
                    if ready:
                        attempt = ready.popleft()
                        if not ready:
                            self._taken.set()
                        await self._execute(attempt, scope)
                    elif self._workers > self._concurrency:
                        self._workers -= 1  # the concurrency was lowered: one worker fewer
                        return
                    else:
                        await self._ready_event.wait()

    def _dispatch(self, attempts: list[Attempt]) -> None:
        self._ready.extend(attempts)
        self._ready_event.set()
        self._ready_event = anyio.Event()

    async def _lease_loop(self) -> None:
        runtime = self._runtime
        clock = runtime.clock
        while True:
            if runtime.missing_seal_key is not None:
                # A job needed a seal key this process lacks (logged and reported by the
                # runtime): lease nothing more, whatever else runs, until a restart with it.
                await anyio.sleep_forever()
            free = self.concurrency - self._held
            if free <= 0:
                await self._capacity_changed.wait()
                continue
            wake = runtime.wake_event(self.queue_name)
            if await is_paused(runtime, self.queue_name):
                # Look again when the flag may have changed (resume() here wakes us at once).
                await self._idle(wake, clock.now(), PAUSE_CHECK)
                continue
            until = await rate_limited_until(runtime, self.queue_name)
            if until is not None:
                # A handler said "too many requests": idle until the pause ends, then look
                # again (another process may have lengthened it).
                now = clock.now()
                await self._idle(wake, now, until - now)
                continue
            limit = await self._allowance(min(free, self._lease_chunk))
            asked_at = clock.now()
            try:
                leases = await runtime.call(
                    "lease",
                    lease_call(
                        runtime,
                        self.queue_name,
                        limit=limit,
                        now=asked_at,
                        lease_seconds=self.lease,
                        limits=self._limits,
                    ),
                )
            except QueueError as exc:
                runtime.events.emit(
                    "queue.error",
                    queue=self.queue_name,
                    backend=runtime.name,
                    at=clock.now(),
                    data={"operation": "lease", "code": exc.code, "error": str(exc)},
                )
                delay = self._lease_retry_delay()
                log.warning(
                    "consumer of %r on backend %r could not lease (%s); retrying in %.2f s",
                    self.queue_name,
                    runtime.name,
                    exc,
                    delay,
                )
                await self._idle(wake, asked_at, delay)
                continue
            self._lease_errors = 0
            if not leases:
                wait = await self._until_due(asked_at)
                leases = await self._idle(wake, asked_at, wait, self._wait_lease(limit))
                if not leases:
                    continue
            self._start(leases)
            if len(leases) < limit:
                # The queue looked drained; give producers a moment (an enqueue here wakes us).
                # The workers start these jobs first (free ones are waiting for them): setting
                # up that wait before they do would delay them.
                if self._ready:
                    self._taken = anyio.Event()
                    await self._taken.wait()
                more = self._wait_lease(min(self.concurrency - self._held, self._lease_chunk))
                self._start(await self._idle(wake, asked_at, self._fast_poll, more))
            elif self._held >= self.concurrency:
                await anyio.lowlevel.checkpoint()
            # Else ask for the next half before the handlers of this one start: the lease's
            # round trip overlaps their run.

    async def _until_due(self, asked_at: float) -> float:
        """How long an idle consumer waits after an empty lease asked at ``asked_at``: its poll
        interval, or less when the backend tells (:class:`~blamequeue.abc.NextDue`) that a
        delayed job or a retry is due sooner, so it starts on time (SPEC §3 item 13).  A job
        due already was held back by a limit: the usual wait then, never a busy loop.  A
        failed read only means the usual wait."""
        wait = self._empty_wait
        runtime = self._runtime
        backend = runtime.backend
        if not isinstance(backend, NextDue):
            return wait
        try:
            due = await runtime.call(
                "next_due", lambda: backend.next_due(self.queue_name, now=asked_at)
            )
        except QueueError as exc:
            log.debug("next due time of %r on %r unknown: %r", self.queue_name, runtime.name, exc)
            return wait
        if due is not None and due > asked_at:
            return min(wait, due - asked_at)
        return wait

    def _lease_retry_delay(self) -> float:
        """How long to wait after a failed lease.  While the breaker is open: until it lets a
        call through again.  Its refusals never reached the backend, so they say nothing new
        and must not grow the backoff (else a long outage keeps the consumer asleep up to
        :data:`_MAX_ERROR_BACKOFF` after the backend is back).  Else: exponential backoff on
        the failures in a row."""
        reopens_in = self._runtime.guard.breaker.retry_in()
        if reopens_in > 0:
            return reopens_in
        self._lease_errors += 1
        backoff: float = self._poll_interval * 2 ** min(self._lease_errors, 8)
        return min(backoff, _MAX_ERROR_BACKOFF)

    async def _allowance(self, free: int) -> int:
        """How many jobs the rate limit lets start now (waits until at least one)."""
        limit = self._rate_limit
        if limit is None:
            return free
        clock = self._runtime.clock
        while True:
            now = clock.now()
            while self._starts and self._starts[0] <= now - limit.per_seconds:
                self._starts.popleft()
            allowed = limit.max - len(self._starts)
            if allowed > 0:
                return min(free, allowed)
            await clock.sleep(self._starts[0] + limit.per_seconds - now)

    def _start(self, leases: list[Lease]) -> None:
        """Hand leased jobs to the workers."""
        if not leases:
            return
        self._held += len(leases)
        self.stats.leased += len(leases)
        self._runtime.leased(self.queue_name, len(leases))
        if self._rate_limit is not None:
            self._starts.extend([self._runtime.clock.now()] * len(leases))
        backoff = self._backoff
        self._dispatch([Attempt.start(lease, backoff=backoff) for lease in leases])

    def _wait_lease(self, free: int) -> int:
        """How many jobs an idle wait may lease as it ends (0: it only waits).  Not under
        fleet or rate limits, whose lease is a call of its own."""
        if self._limits is not None or self._rate_limit is not None:
            return 0
        return max(0, free)

    async def _idle(
        self, wake: anyio.Event, asked_at: float, timeout: float, lease: int = 0
    ) -> list[Lease]:
        """Wait ``timeout`` after the lease asked at ``asked_at``, or less if work may be due.

        Measured from ``asked_at``, not from now: if the clock moved while the empty lease was
        in flight (a virtual clock advanced by a test, a slow round trip), jobs that became due
        meanwhile are leased at once instead of one poll later.

        With ``lease`` > 0, on real time, the backend may lease up to that many jobs the moment
        its wait ends (:meth:`Backend.wait_and_lease`); they are returned.
        """
        if wake.is_set():
            return []
        runtime = self._runtime
        clock = runtime.clock
        deadline = asked_at + timeout
        remaining = deadline - clock.now()
        if remaining <= 0:
            await anyio.lowlevel.checkpoint()
            return []
        timeout = remaining
        if type(clock) is SystemClock:
            # Real time: a deadline and a wake-up cancel the backend's wait in this very task,
            # without the tasks racing it below (their start and teardown were a sixth of the
            # idle latency).
            with (
                anyio.move_on_after(timeout) as scope,
                runtime.cancelled_on_wake(self.queue_name, scope),
            ):
                backend = runtime.backend
                try:
                    if lease > 0 and isinstance(backend, WaitAndLease):
                        taken = await backend.wait_and_lease(
                            self.queue_name,
                            timeout=timeout,
                            limit=lease,
                            now=clock.now(),
                            lease_seconds=self.lease,
                        )
                        return taken or []
                    await backend.wait_for_work(self.queue_name, timeout=timeout)
                except Exception as exc:
                    log.debug("waiting for work on %r failed: %r", runtime.name, exc)
                    await anyio.sleep(timeout)
            return []

        async def until_deadline() -> None:
            # Measured when this task actually starts: the clock may move before it does.
            await clock.sleep(deadline - clock.now())

        # Whichever comes first: a same-process enqueue, the poll interval on the queue's clock,
        # or the backend's own wait (real time by default, so a virtual clock that nobody
        # advances never parks a consumer for ever; early when another process enqueues).
        waits: list[Callable[[], Awaitable[None]]] = [
            wake.wait,
            until_deadline,
            lambda: runtime.backend.wait_for_work(self.queue_name, timeout=timeout),
        ]
        async with anyio.create_task_group() as tg:

            async def first(wait: Callable[[], Awaitable[None]]) -> None:
                try:
                    await wait()
                except Exception as exc:
                    # Waiting is advisory: a failing wait only means we poll on time.
                    log.debug("waiting for work on %r failed: %r", runtime.name, exc)
                    await anyio.sleep(timeout)
                tg.cancel_scope.cancel()

            for wait in waits:
                tg.start_soon(first, wait)
        return []

    async def _execute(self, attempt: Attempt, scope: anyio.CancelScope) -> None:
        """Run ``attempt`` in the worker's ``scope`` (which cancelling the job cancels) and
        queue its settlement."""
        job_id = attempt.job.id
        self._running[job_id] = (attempt, scope)
        try:
            if self._aborting:
                scope.cancel()
            attempt.settlement = await run_attempt(self._runtime, attempt, self._handler)
        except anyio.get_cancelled_exc_class():
            if scope.cancel_called:
                # This job was cancelled (Queue.cancel, or abort at shutdown): settled as
                # below, by the settle loop; the worker's scope ends here and swallows this.
                self._queue_settlement(attempt)
                raise
            # Cancelled from outside the consumer (its task group is going away): the settle
            # loop is being cancelled too, so hand the job back here, shielded.
            attempt.settlement = release(self._runtime, attempt)
            counts = SettleCounts()
            with anyio.CancelScope(shield=True):
                await settle(self._runtime, [attempt], counts)
            self.stats.add(counts)
            self._held -= 1
            raise
        finally:
            self._running.pop(job_id, None)
        self._queue_settlement(attempt)

    def _queue_settlement(self, attempt: Attempt) -> None:
        if attempt.state.cancelled:
            # Queue.cancel already ended the job in the store; its lease settles nothing.
            attempt.settlement = None
            self.stats.stale += 1
        elif attempt.settlement is None:
            # Cancelled at shutdown: give the job back now rather than after its lease.
            attempt.settlement = release(self._runtime, attempt)
        self._to_settle.append(attempt)
        self._settle_wanted.set()

    async def _settle_loop(self) -> None:
        while True:
            await self._settle_wanted.wait()
            self._settle_wanted = anyio.Event()
            batch, self._to_settle = self._to_settle, []
            counts = SettleCounts()
            with anyio.CancelScope(shield=True):
                await settle(self._runtime, batch, counts)
            self.stats.add(counts)
            self._held -= len(batch)
            if self._limits is not None and self._limits.group_concurrency is not None:
                # A settled job may free its group's slot: idle consumers here may lease.
                self._runtime.notify(self.queue_name)
            self._capacity_changed.set()
            self._capacity_changed = anyio.Event()

    async def _heartbeat_loop(self) -> None:
        runtime = self._runtime
        while True:
            await runtime.clock.sleep(self.lease / 3)
            target = runtime.clock.now() + self.lease
            attempts = [
                attempt
                for attempt, _scope in self._running.values()
                if not attempt.state.lost and attempt.state.expires_at < target
            ]
            if not attempts:
                continue
            pairs = [(a.state.job_id, a.state.token) for a in attempts]
            try:
                held = await runtime.call(
                    "extend", functools.partial(runtime.backend.extend, pairs, expires_at=target)
                )
            except QueueError as exc:
                log.warning(
                    "could not renew %d lease(s) on %r: %s",
                    len(pairs),
                    runtime.name,
                    exc,
                    extra=jobs_extra(
                        runtime.name, [job_id for job_id, _ in pairs], [self.queue_name]
                    ),
                )
                continue
            for attempt, ok in zip(attempts, held, strict=True):
                if ok:
                    attempt.state.expires_at = target
                elif ok is None:
                    running = self._running.get(attempt.job.id)
                    stop_cancelled(attempt.state, running[1] if running else None)
                else:
                    attempt.state.lost = True
