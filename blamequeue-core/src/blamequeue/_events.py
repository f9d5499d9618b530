"""In-process events: ``queue.on(name, listener)`` and friends (SPEC §9).

An event is raised in the process where its thing happens (``job.added`` in the producer,
``job.processing`` / ``job.completed`` / ``job.failed`` / ``job.retrying`` / ``job.dead`` in
the worker, ``job.stalled`` in whichever process's sweep found the expired lease, ...).  A
failure raises ``job.failed``, then ``job.retrying`` or, when it was the last, ``job.dead``
(SPEC §15).  For figures that every process sees, read the backend-kept metrics
(``Queue.metrics``); to receive the events of every process, ``Queue.watch``
(:mod:`._queue_watch`: a backend with ``queue_events`` taps :class:`EventBus` through
:meth:`EventBus.tap`).

Listeners are plain or ``async`` callables taking one :class:`QueueEvent`.  Plain ones run
inline, so they must be quick; ``async`` ones run as tasks of the queue's task group, so a slow
one never holds up a worker (at most :data:`MAX_PENDING_LISTENERS` run at once; beyond that,
events for async listeners are dropped and counted, with a warning).  A listener that raises is
logged and the queue goes on.  Bound methods are held weakly: a listener whose object was
garbage-collected is dropped, so subscribing an object's methods never keeps it alive.
Plain functions are held strongly (a lambda would otherwise vanish at once).  Raising an event
nobody listens to costs one dict lookup.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Final, Literal, Protocol, TypeVar, get_args

import anyio
import attrs
from anyio.abc import TaskGroup

from ._clock import to_datetime
from .errors import BadArgumentError

__all__ = [
    "EVENT_NAMES",
    "MAX_PENDING_LISTENERS",
    "EventBus",
    "EventName",
    "EventSubscription",
    "EventTap",
    "QueueEvent",
    "TAPPED",
    "listens_to",
]

log = logging.getLogger("blamequeue")

EventName = Literal[
    "job.added",
    "job.processing",
    "job.completed",
    "job.failed",
    "job.retrying",
    "job.stalled",
    "job.progress",
    "job.dead",
    "queue.drained",
    "queue.paused",
    "queue.resumed",
    "queue.error",
    "worker.started",
    "worker.stopped",
    "batch.added",
    "batch.completed",
    "batch.failed",
]

#: Every event name, in the order of the documentation.
EVENT_NAMES: Final[tuple[str, ...]] = get_args(EventName)

MAX_PENDING_LISTENERS: Final = 1000
"""The most ``async`` listener calls running at once per queue."""

_MARK = "__blamequeue_listens_to__"

Listener = Callable[["QueueEvent"], Any]
F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen(kw_only=True)
class QueueEvent:
    """One event, as listeners get it."""

    name: str
    queue: str | None
    backend: str | None
    at: datetime
    job_id: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=dict)
    """Event-specific details: ``attempts`` and ``error`` for failures, ``percent`` for
    progress, ``worker_id`` for workers, ``batch_id`` for batches, ..."""


def listens_to(*names: str) -> Callable[[F], F]:
    """Mark a method as a listener of ``names`` (``"*"``: every event); subscribe the object's
    marked methods with :meth:`Queue.listen` (held weakly)."""
    for name in names:
        _check_name(name, allow_any=True)

    def mark(method: F) -> F:
        setattr(method, _MARK, (*getattr(method, _MARK, ()), *names))
        return method

    return mark


def _check_name(name: Any, *, allow_any: bool = False) -> str:
    if allow_any and name == "*":
        return "*"
    if not isinstance(name, str) or name not in EVENT_NAMES:
        raise BadArgumentError(
            "queue/bad-argument",
            f"unknown event {name!r}; events are: {', '.join(EVENT_NAMES)}"
            + (" (or '*' for all)" if allow_any else ""),
        )
    checked: str = name
    return checked


class EventTap(Protocol):
    """Where a backend's events also go (``Queue.watch`` across processes): the publisher of
    :mod:`._queue_watch`.  Called for every event of :data:`TAPPED` the bus raises for that
    backend, whether or not a listener wants it, so it must be a list append."""

    def offer(
        self,
        queue: str,
        name: str,
        *,
        at: float,
        job_id: str | None,
        data: Mapping[str, Any],
    ) -> None: ...


#: The events that reach ``Queue.watch`` (SPEC §15): a queue's jobs and the queue itself.
TAPPED: Final = frozenset(
    name
    for name in get_args(EventName)
    if name.startswith("job.") or name in ("queue.drained", "queue.paused", "queue.resumed")
)


class _Entry:
    """One subscription: the listener (weakly, for bound methods), once or not."""

    __slots__ = ("asynchronous", "bus", "key", "name", "once", "ref", "strong")

    def __init__(self, bus: EventBus, name: str, listener: Listener, once: bool) -> None:
        self.bus, self.name, self.once = bus, name, once
        self.strong: Listener | None = None
        self.ref: weakref.WeakMethod[Any] | None = None
        if inspect.ismethod(listener):
            self.ref = weakref.WeakMethod(listener, self._gone)
        else:
            self.strong = listener
        self.key = _identity(listener)
        target = getattr(listener, "__func__", listener)
        self.asynchronous = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
            getattr(target, "__call__", None)  # noqa: B004 - async callable objects
        )

    def _gone(self, _ref: Any) -> None:
        self.bus._remove(self)

    def listener(self) -> Listener | None:
        if self.strong is not None:
            return self.strong
        return None if self.ref is None else self.ref()


def _identity(listener: Listener) -> tuple[int, int]:
    if inspect.ismethod(listener):
        return id(listener.__self__), id(listener.__func__)
    return 0, id(listener)


@attrs.frozen
class EventSubscription:
    """What :meth:`Queue.on` and friends return: ``unsubscribe()`` ends it (idempotent)."""

    _bus: EventBus
    _entries: tuple[_Entry, ...]

    def unsubscribe(self) -> None:
        for entry in self._entries:
            self._bus._remove(entry)


class EventBus:
    """The listeners of one :class:`~blamequeue.Queue`."""

    def __init__(self) -> None:
        self._by_name: dict[str, list[_Entry]] = {}
        self._task_group: TaskGroup | None = None
        self._taps: dict[str, EventTap] = {}
        self._pending = 0
        self.dropped = 0
        """Async listener calls dropped because :data:`MAX_PENDING_LISTENERS` were running."""

    def attach(self, task_group: TaskGroup | None) -> None:
        """Where async listeners run (the started queue's task group; ``None`` when stopped:
        async listeners then run inline)."""
        self._task_group = task_group

    def subscribe(self, name: str, listener: Listener, *, once: bool = False) -> EventSubscription:
        if not callable(listener):
            raise BadArgumentError(
                "queue/bad-argument", f"a listener must be callable, got {listener!r}"
            )
        key = "*" if name == "*" else _check_name(name)
        entry = _Entry(self, key, listener, once)
        self._by_name.setdefault(key, []).append(entry)
        return EventSubscription(self, (entry,))

    def subscribe_object(self, target: object) -> EventSubscription:
        entries: list[_Entry] = []
        for _, method in inspect.getmembers(target, inspect.ismethod):
            for name in getattr(method.__func__, _MARK, ()):
                entry = _Entry(self, name, method, False)
                self._by_name.setdefault(name, []).append(entry)
                entries.append(entry)
        if not entries:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{target!r} has no method marked with @blamequeue.listens_to(...); mark the "
                f"methods that should receive events",
            )
        return EventSubscription(self, tuple(entries))

    def unsubscribe(self, name: str, listener: Listener) -> int:
        """Remove every subscription of ``listener`` to ``name``; returns how many."""
        key = "*" if name == "*" else _check_name(name)
        identity = _identity(listener)
        entries = [e for e in self._by_name.get(key, []) if e.key == identity]
        for entry in entries:
            self._remove(entry)
        return len(entries)

    def _remove(self, entry: _Entry) -> None:
        entries = self._by_name.get(entry.name)
        if entries is not None and entry in entries:
            entries.remove(entry)
            if not entries:
                del self._by_name[entry.name]

    def tap(self, backend: str, tap: EventTap) -> None:
        """Hand every event of :data:`TAPPED` raised for ``backend`` to ``tap`` as well."""
        self._taps[backend] = tap

    def wants(self, name: str) -> bool:
        """Whether anyone listens to ``name`` (a listener, or a tap): callers skip building
        events nobody gets."""
        by_name = self._by_name
        if by_name and (name in by_name or "*" in by_name):
            return True
        return bool(self._taps) and name in TAPPED

    def emit(
        self,
        name: str,
        *,
        queue: str | None,
        backend: str | None,
        at: float,
        job_id: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        tap = self._taps.get(backend) if backend is not None else None
        if tap is not None and queue is not None and name in TAPPED:
            tap.offer(queue, name, at=at, job_id=job_id, data=data or {})
        by_name = self._by_name
        if not (by_name and (name in by_name or "*" in by_name)):
            return
        event = QueueEvent(
            name=name,
            queue=queue,
            backend=backend,
            at=to_datetime(at),
            job_id=job_id,
            data=dict(data or {}),
        )
        for entry in [*self._by_name.get(name, ()), *self._by_name.get("*", ())]:
            listener = entry.listener()
            if listener is None:
                continue
            if entry.once:
                self._remove(entry)
            if entry.asynchronous:
                self._start(listener, event)
            else:
                try:
                    listener(event)
                except Exception:
                    log.exception("event listener %r failed on %s", listener, name)

    def _start(self, listener: Listener, event: QueueEvent) -> None:
        group = self._task_group
        if group is None:
            log.warning(
                "async listener %r not run for %s: the queue is not started", listener, event.name
            )
            return
        if self._pending >= MAX_PENDING_LISTENERS:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "%d async listener call(s) dropped: %d are still running (slow listeners?)",
                    self.dropped,
                    self._pending,
                )
            return
        self._pending += 1
        group.start_soon(self._run, listener, event)

    async def _run(self, listener: Listener, event: QueueEvent) -> None:
        try:
            result = listener(event)
            if isinstance(result, Awaitable):
                await result
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("event listener %r failed on %s", listener, event.name)
        finally:
            self._pending -= 1
