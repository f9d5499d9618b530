"""A queue's events across processes (SPEC §15): ``Queue.watch`` and what feeds it.

**Publishing.**  Every process hands the events it raises of a queue (``job.added`` in the
producer, ``job.processing`` in the worker, ``job.stalled`` in the sweeping process, ...) to
its backend's :class:`EventPublisher` (an :class:`~blamequeue._events.EventTap`: a list append
on the hot path).  The publisher writes them to the queue's event log in the store
(:class:`~blamequeue.abc.QueueEvents`) from a task of its own, each queue's pending events in
one call, but only while someone watches that queue: a watcher marks the queue watched in the
store (:meth:`~blamequeue.abc.QueueEvents.mark_watched`, renewed while it watches), and each
publisher asks (:meth:`~blamequeue.abc.QueueEvents.is_watched`) at most once per
:data:`PRESENCE_CHECK` seconds per queue it has events of.  Until its next look, a publisher
holds what it raised; a look that finds no watcher drops what was raised before the look
began, never what came after, so no event raised after a watch opened is lost.  Nobody
watching costs a list append per event and one cheap read per queue and second.

**Watching.**  A :class:`QueueWatch` reads the log from the moment it is entered.  Each process
writes its own events in order, but two processes' writes may land in either order (the
producer's ``job.added`` after the worker's ``job.processing``), so the watch holds an event
whose predecessor in its job's lifecycle (``added < processing(n) < progress / completed /
failed(n) < retrying / dead(n) < processing(n + 1)``) has not come, for at most
:data:`ORDER_WAIT` seconds, then lets it go.

What reaches the store is what an operator may read: names, ids, attempt counts, times and the
exception *type* of a failure, never a payload, a result, an error message or progress data
(any of those may quote the job's secrets).  A watcher wanting more reads the job
(``Queue.get_job``), which opens sealed fields only with the key.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict, deque
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Final, Self

import anyio
import attrs

from ._audit import error_type
from ._clock import to_datetime
from ._codec import compact_json
from ._events import QueueEvent
from .abc import Clock, EventRead, NextDue, QueueEvents, QueueFeed
from .errors import QueueError

__all__ = [
    "GAP_EVENT",
    "MAX_HELD",
    "ORDER_WAIT",
    "PRESENCE_CHECK",
    "PRESENCE_TTL",
    "EventPublisher",
    "QueueWatch",
    "decode_event",
    "encode_event",
]

log = logging.getLogger("blamequeue")

GAP_EVENT: Final = "watch.gap"
"""Raised to a watcher in place of events the store's capped log dropped before it read them."""

PRESENCE_CHECK: Final = 1.0
"""Real seconds a publisher trusts its last look at whether a queue is watched."""

PRESENCE_TTL: Final = 10.0
"""Seconds (the queue's clock) a watcher's mark lasts; it is renewed every third of that."""

ORDER_WAIT: Final = 1.5
"""Real seconds a watch holds an event whose predecessor (of the same job) has not come."""

MAX_HELD: Final = 10_000
"""Events one publisher holds at most; beyond that (the store is slow or unreachable) the
oldest are dropped, counted and logged."""

#: Real seconds a watcher's read waits before it looks again (renewing its mark, letting go of
#: events held for order).
READ_WAIT: Final = 1.0
#: Real seconds a watcher waits after a read the store refused (it then reads on).
READ_RETRY: Final = 0.5
#: Jobs whose last event a watch remembers (the oldest forgotten first).
_REMEMBERED: Final = 100_000

#: The keys of ``data`` a stored event may carry: counts, times, flags and type names only.
_SHARED_KEYS: Final = frozenset(
    {"attempts", "retry_at", "dead", "percent", "deferred", "stalled", "error_type"}
)

_Raised = tuple[str, float, str | None, Mapping[str, Any]]


def encode_event(name: str, *, at: float, job_id: str | None, data: Mapping[str, Any]) -> str:
    """The text of one event in the store's log (compact JSON): its name, time, job id and
    the shareable part of ``data`` (an ``error`` becomes its ``error_type``)."""
    event: dict[str, Any] = {"n": name, "t": at}
    if job_id is not None:
        event["j"] = job_id
    shared = {key: value for key, value in data.items() if key in _SHARED_KEYS}
    if "error" in data:
        shared["error_type"] = error_type(data["error"])
    if shared:
        event["d"] = shared
    return compact_json(event)


def decode_event(text: str, *, queue: str, backend: str) -> QueueEvent | None:
    """The event stored as ``text``, or ``None`` (logged) for text this version cannot read."""
    try:
        raw = json.loads(text)
        name, at = raw["n"], raw["t"]
        job_id = raw.get("j")
        data = raw.get("d", {})
        if (
            not isinstance(name, str)
            or isinstance(at, bool)
            or not isinstance(at, int | float)
            or not math.isfinite(at)
            or not (job_id is None or isinstance(job_id, str))
            or not isinstance(data, dict)
        ):
            raise ValueError("unexpected field types")
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("unreadable event in the log of %r skipped: %s", queue, exc)
        return None
    return QueueEvent(
        name=name, queue=queue, backend=backend, at=to_datetime(at), job_id=job_id, data=data
    )


@attrs.define
class _Presence:
    """What a publisher knows of one queue's watchers."""

    watched: bool = False
    checked_at: float = -math.inf
    """When the store was last asked (``anyio.current_time()``)."""
    local: int = 0
    """Watches of the queue open in this process through this backend."""


@attrs.define(eq=False)
class EventPublisher:
    """One backend's events raised in this process, on their way to its event log."""

    backend: QueueEvents
    clock: Clock
    name: str
    """The backend's name, for log lines."""
    _held: dict[str, deque[_Raised]] = attrs.field(factory=dict, init=False)
    _count: int = attrs.field(default=0, init=False)
    _presence: dict[str, _Presence] = attrs.field(factory=dict, init=False)
    _drain_checks: dict[str, float] = attrs.field(factory=dict, init=False)
    _wake: anyio.Event | None = attrs.field(default=None, init=False)
    _writing: anyio.Lock | None = attrs.field(default=None, init=False)
    dropped: int = attrs.field(default=0, init=False)
    """Events dropped because the store did not take them (or :data:`MAX_HELD` waited)."""

    # -- the hot path --------------------------------------------------------------------
    def offer(
        self,
        queue: str,
        name: str,
        *,
        at: float,
        job_id: str | None,
        data: Mapping[str, Any],
    ) -> None:
        """Hold one event for the store (a list append)."""
        held = self._held.get(queue)
        if held is None:
            held = self._held[queue] = deque()
        held.append((name, at, job_id, data))
        self._count += 1
        if self._count > MAX_HELD:
            self._drop_oldest()
        wake = self._wake
        if wake is not None:
            presence = self._presence.get(queue)
            # A queue known unwatched waits for the next look, which is already timed.
            if presence is None or presence.watched or presence.local:
                wake.set()

    def leased(self, queue: str, *, at: float) -> None:
        """A lease of ``queue`` at ``at`` took jobs, maybe its last due ones: while the queue
        is watched, the store is asked (:meth:`~blamequeue.abc.NextDue.next_due`, off the hot
        path) and ``queue.drained`` raised when no job is due any more."""
        presence = self._presence.get(queue)
        if presence is not None and not (presence.watched or presence.local):
            return
        if isinstance(self.backend, NextDue):
            self._drain_checks[queue] = at
            if self._wake is not None:
                self._wake.set()

    def _drop_oldest(self) -> None:
        queue = next(iter(self._held))
        held = self._held[queue]
        held.popleft()
        if not held:
            del self._held[queue]
        self._count -= 1
        presence = self._presence.get(queue)
        if presence is not None and (presence.watched or presence.local):
            self._dropped(1, queue, "too many were waiting for the store")
        # Else nobody was known to watch: the next look would most likely drop it too, and a
        # busy queue nobody watches raises more than MAX_HELD between two looks.

    def _dropped(self, count: int, queue: str, why: str) -> None:
        before, self.dropped = self.dropped, self.dropped + count
        if before == 0 or before // 1000 != self.dropped // 1000:
            log.warning(
                "backend %r: %d queue event(s) for watchers dropped so far (%s, on %r)",
                self.name,
                self.dropped,
                why,
                queue,
            )

    # -- watches of this process -------------------------------------------------------------
    def watch_opened(self, queue: str) -> None:
        """A watch of ``queue`` opened here: what this process raised before is not its."""
        self._presence.setdefault(queue, _Presence()).local += 1
        self._discard(queue, len(self._held.get(queue, ())))

    def watch_closed(self, queue: str) -> None:
        presence = self._presence.get(queue)
        if presence is not None and presence.local > 0:
            presence.local -= 1

    # -- the writing task ----------------------------------------------------------------
    async def run(self) -> None:
        """Write what watchers want, as it is raised, until cancelled."""
        while True:
            wake = self._wake = anyio.Event()
            delay = await self.flush()
            if wake.is_set():
                continue
            if delay is None:
                await wake.wait()
            else:
                with anyio.move_on_after(delay):
                    await wake.wait()

    async def flush(self) -> float | None:
        """Look at the presence of watchers where due, write the events of every watched
        queue (each queue's in one call) and drop those nobody watched.  Returns the real
        seconds until the next look is due, ``None`` when nothing is held."""
        if self._writing is None:
            self._writing = anyio.Lock()
        async with self._writing:
            next_look: float | None = None
            for queue in list(self._held):
                presence = self._presence.setdefault(queue, _Presence())
                if not presence.local and (
                    anyio.current_time() - presence.checked_at >= PRESENCE_CHECK
                ):
                    await self._look(queue, presence)
                if presence.local or presence.watched:
                    await self._write(queue)
                elif queue in self._held:
                    due = presence.checked_at + PRESENCE_CHECK - anyio.current_time()
                    next_look = due if next_look is None else min(next_look, due)
            checks, self._drain_checks = self._drain_checks, {}
            for queue, at in checks.items():
                known = self._presence.get(queue)
                if known is not None and (known.watched or known.local):
                    await self._check_drained(queue, at)  # written at the next turn
            return None if next_look is None else max(0.0, next_look)

    async def _check_drained(self, queue: str, at: float) -> None:
        assert isinstance(self.backend, NextDue)
        try:
            due = await self.backend.next_due(queue, now=at)
        except QueueError:
            return  # unknown is not drained
        if due is None or due > at:
            self.offer(queue, "queue.drained", at=at, job_id=None, data={})

    async def _look(self, queue: str, presence: _Presence) -> None:
        cut = len(self._held.get(queue, ()))
        try:
            watched = await self.backend.is_watched(queue, now=self.clock.now())
        except QueueError as exc:
            # Unknown: keep holding (bounded), look again at the next turn.
            log.debug("backend %r: watchers of %r not known: %s", self.name, queue, exc)
            presence.checked_at = anyio.current_time()
            return
        presence.checked_at = anyio.current_time()
        presence.watched = watched
        if not watched:
            # Raised before the look began: before any watch the look would have seen.
            self._discard(queue, cut)

    def _discard(self, queue: str, count: int) -> None:
        held = self._held.get(queue)
        if held is None or count <= 0:
            return
        count = min(count, len(held))
        for _ in range(count):
            held.popleft()
        self._count -= count
        if not held:
            del self._held[queue]

    async def _write(self, queue: str) -> None:
        batch = self._held.pop(queue, None)
        if not batch:
            return
        self._count -= len(batch)
        texts = [encode_event(n, at=at, job_id=j, data=d) for n, at, j, d in batch]
        try:
            await self.backend.publish_events(queue, texts, now=self.clock.now())
        except QueueError as exc:
            # Events are advisory: the jobs are untouched; a watcher sees a hole.
            self._dropped(len(texts), queue, f"the store refused them: {exc}")


_PROCESSED: Final = frozenset({"job.processing", "job.progress"})


class _JobOrder:
    """Per job, the last event let through, and the events held until their predecessor
    comes (or :data:`ORDER_WAIT` passes)."""

    def __init__(self) -> None:
        self._last: OrderedDict[str, QueueEvent] = OrderedDict()
        self._held: dict[str, list[tuple[float, QueueEvent]]] = {}
        self._deadlines: deque[tuple[float, str]] = deque()

    def offer(self, event: QueueEvent, now: float, out: deque[QueueEvent]) -> None:
        job_id = event.job_id
        if job_id is None:
            out.append(event)
            return
        deadline = now + ORDER_WAIT
        self._held.setdefault(job_id, []).append((deadline, event))
        self._deadlines.append((deadline, job_id))
        self._drain(job_id, out)

    def wait_time(self, now: float, longest: float) -> float:
        if not self._deadlines:
            return longest
        return max(0.0, min(longest, self._deadlines[0][0] - now))

    def release_overdue(self, now: float, out: deque[QueueEvent]) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, job_id = self._deadlines.popleft()
            held = self._held.get(job_id)
            if held and held[0][0] <= now:
                _, event = held.pop(0)
                self._let_through(job_id, event, out)
                if held:
                    self._drain(job_id, out)
                else:
                    del self._held[job_id]

    def _drain(self, job_id: str, out: deque[QueueEvent]) -> None:
        held = self._held[job_id]
        moved = True
        while held and moved:
            moved = False
            for index, (_, event) in enumerate(held):
                if self._follows(job_id, event):
                    del held[index]
                    self._let_through(job_id, event, out)
                    moved = True
                    break
        if not held:
            del self._held[job_id]

    def _let_through(self, job_id: str, event: QueueEvent, out: deque[QueueEvent]) -> None:
        out.append(event)
        self._last[job_id] = event
        self._last.move_to_end(job_id)
        if len(self._last) > _REMEMBERED:
            self._last.popitem(last=False)

    def _follows(self, job_id: str, event: QueueEvent) -> bool:
        """Whether ``event`` comes right after the last event let through for its job."""
        name = event.name
        if name == "job.added":
            return True
        last = self._last.get(job_id)
        if last is None:
            return False
        before = last.name
        attempt, previous = event.data.get("attempts"), last.data.get("attempts")
        same = attempt == previous
        if name == "job.processing":
            if before in ("job.retrying", "job.stalled"):
                return isinstance(previous, int) and attempt == previous + 1
            # The first attempt: after its enqueue, or after a rerun / dlq_retry.
            return attempt == 1 and before in ("job.added", "job.completed", "job.dead")
        if name == "job.progress":
            return before in _PROCESSED
        if name in ("job.completed", "job.failed", "job.stalled"):
            return before in _PROCESSED and (same or before == "job.progress")
        if name == "job.retrying":
            if event.data.get("deferred"):  # the attempt given back: one fewer
                return before in _PROCESSED and isinstance(attempt, int)
            return before == "job.failed" and same
        if name == "job.dead":
            return before in ("job.failed", "job.stalled") and same
        return True


class QueueWatch:
    """What :meth:`Queue.watch <blamequeue.Queue.watch>` returns: enter it, then iterate it::

        async with queue.watch("emails") as events:
            async for event in events:  # QueueEvent
                print(event.name, event.job_id)

    Yields the events of the queue raised after entering, by any process sharing the backend,
    in order per job; a ``watch.gap`` event stands for events the capped log dropped before
    this watcher read them.  Iteration never ends by itself: leave the ``async for``
    (``break``) or cancel it.
    """

    def __init__(
        self, backend: QueueEvents, publisher: EventPublisher | None, queue: str, name: str
    ) -> None:
        self._backend = backend
        self._publisher = publisher
        self._queue = queue
        self._name = name
        self._clock = backend.context.clock
        self._context: AbstractAsyncContextManager[QueueFeed] | None = None
        self._feed: QueueFeed | None = None
        self._ready: deque[QueueEvent] = deque()
        self._order = _JobOrder()
        self._renew_at = -math.inf

    async def __aenter__(self) -> Self:
        if self._context is not None:
            raise QueueError("queue/bad-argument", "a queue watch can be entered only once")
        await self._renew(strict=True)
        self._context = self._backend.watch_queue(self._queue)
        self._feed = await self._context.__aenter__()
        if self._publisher is not None:
            self._publisher.watch_opened(self._queue)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        context, self._feed = self._context, None
        if self._publisher is not None and context is not None:
            self._publisher.watch_closed(self._queue)
        if context is not None:
            with anyio.CancelScope(shield=True):
                await context.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> QueueEvent:
        while not self._ready:
            feed = self._feed
            if feed is None:
                raise QueueError(
                    "queue/bad-argument",
                    "iterate a queue watch inside its `async with queue.watch(...)` block",
                )
            await self._renew(strict=False)
            try:
                read = await feed.read(self._order.wait_time(anyio.current_time(), READ_WAIT))
            except QueueError as exc:
                if not exc.retryable:
                    raise
                # The cursor stays where it was: reading on loses nothing the log still holds.
                log.warning("watch of %r: the store did not answer (%s)", self._queue, exc)
                await anyio.sleep(READ_RETRY)
                continue
            self._take(read)
            self._order.release_overdue(anyio.current_time(), self._ready)
        return self._ready.popleft()

    async def _renew(self, *, strict: bool) -> None:
        now = self._clock.now()
        if now < self._renew_at:
            return
        try:
            await self._backend.mark_watched(self._queue, until=now + PRESENCE_TTL, now=now)
        except QueueError as exc:
            if strict or not exc.retryable:
                raise
            log.warning("watch of %r: its mark was not renewed (%s)", self._queue, exc)
            return
        self._renew_at = now + PRESENCE_TTL / 3

    def _take(self, read: EventRead) -> None:
        now = anyio.current_time()
        if read.missed:
            self._ready.append(
                QueueEvent(
                    name=GAP_EVENT,
                    queue=self._queue,
                    backend=self._name,
                    at=to_datetime(self._clock.now()),
                )
            )
        for text in read.events:
            event = decode_event(text, queue=self._queue, backend=self._name)
            if event is not None:
                self._order.offer(event, now, self._ready)
