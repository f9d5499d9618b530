"""Record dispatches instead of storing them, assert on them, and run handlers directly.

::

    with QueueFake(queue) as fake:
        await signup(queue, "ada@example.com")          # code under test calls queue.enqueue
    fake.assert_dispatched("emails", {"to": "ada@example.com"})
    fake.assert_dispatched_with_delay("emails", 60)

    result = await fake.run_job(send_email, {"to": "ada@example.com"})
    err = await fake.expect_job_to_fail(send_email, {"to": ""}, ValueError)
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import attrs

from blamequeue._backoff import parse_backoff
from blamequeue._codec import dumps
from blamequeue._job_logs import check_message
from blamequeue._job_seals import CONTEXT_META_KEY, TASK_META_KEY
from blamequeue._models import Job
from blamequeue._tasks import (
    FunctionTask,
    RegisteredTask,
    Task,
    to_wire,
)
from blamequeue._uniqueness import refuse_in_batch, unique_claim
from blamequeue._validation import (
    check_delay,
    check_max_attempts,
    check_optional_str,
    check_positive_seconds,
    check_priority,
    check_queue_name,
)
from blamequeue.abc import Clock
from blamequeue.errors import BadArgumentError

if TYPE_CHECKING:
    from blamequeue import Queue

__all__ = ["Dispatch", "FakeJobContext", "QueueFake", "SyncFakeJobContext"]

_PATCHED = ("enqueue", "enqueue_many", "_enqueue_task")
_SHOWN = 20  # dispatches listed in a failure message


@attrs.frozen(kw_only=True)
class Dispatch:
    """One recorded ``enqueue`` (``enqueue_many`` records one per payload).

    ``options`` holds exactly the keyword arguments the call passed (``delay``, ``priority``,
    ``backend``, ...), nothing defaulted.
    """

    queue_name: str
    payload: Any
    options: Mapping[str, Any]
    job_id: str
    task: str | None = None
    """The task name, for a task dispatched with ``dispatch`` or ``queue.job(...)``; its
    ``payload`` is the object given to ``dispatch`` (a dataclass stays a dataclass)."""

    @property
    def delay(self) -> float:
        """The ``delay`` passed, ``0.0`` when none was."""
        return float(self.options.get("delay") or 0.0)

    @property
    def backend(self) -> str | None:
        """The ``backend`` passed, ``None`` (the default backend) when none was."""
        value = self.options.get("backend")
        return None if value is None else str(value)

    def describe(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.options.items())
        task = f"task {self.task!r} " if self.task is not None else ""
        return f"{self.job_id} {task}on {self.queue_name!r}: {self.payload!r}" + (
            f" ({options})" if options else ""
        )


Predicate = Callable[[Dispatch], object] | Any
"""A callable given each :class:`Dispatch` (truthy = match), or a value compared with
``payload`` by ``==``."""


Target = Any
"""A queue name (``str``), or a task (a ``blamequeue.Task`` subclass or a ``@task`` function)
to select that task's dispatches, on whatever queue they went to."""


def _task_name(target: Any) -> str | None:
    if isinstance(target, FunctionTask):
        return target.settings.name
    if isinstance(target, type) and issubclass(target, Task):
        return target.settings().name
    return None


def _selects(dispatch: Dispatch, target: Target) -> bool:
    if target is None:
        return True
    name = _task_name(target)
    if name is not None:
        return dispatch.task == name
    return bool(dispatch.queue_name == target)


def _where(target: Target) -> str:
    name = _task_name(target)
    return f"of task {name!r}" if name is not None else f"on queue {target!r}"


def _matches(dispatch: Dispatch, predicate: Predicate) -> bool:
    if predicate is None:
        return True
    if callable(predicate):
        return bool(predicate(dispatch))
    return bool(dispatch.payload == predicate)


def _describe_predicate(predicate: Predicate) -> str:
    if predicate is None:
        return ""
    if callable(predicate):
        return f" matching {getattr(predicate, '__qualname__', repr(predicate))}"
    return f" with payload {predicate!r}"


def _check_call(queue_name: Any, options: Mapping[str, Any]) -> None:
    """Refuse what ``Queue.enqueue`` would refuse, with the engine's own checks and errors."""
    check_queue_name(queue_name)
    if "priority" in options:
        check_priority(options["priority"])
    if "delay" in options:
        check_delay(options["delay"])
    if "max_attempts" in options:
        check_max_attempts(options["max_attempts"])
    for key in ("classification", "trace_id"):
        if key in options:
            check_optional_str(options[key], key)
    if options.get("backoff") is not None:
        parse_backoff(options["backoff"])
    unique_claim(options.get("unique_key"), options.get("unique_for"))
    if options.get("timeout") is not None:
        check_positive_seconds(options["timeout"], "timeout")


class _ContextRecords:
    """What a handler did with its context: lease extensions, progress reports and log lines."""

    def __init__(
        self,
        job: Job,
        lease_expires_at: datetime,
        now: Callable[[], datetime],
        dependency_results: Mapping[str, Any] | None = None,
    ) -> None:
        self.job = job
        self.lease_expires_at = lease_expires_at
        self._now = now
        self._dependency_results = dict(dependency_results or {})
        self.extensions: list[float] = []
        """Each ``extend_lease(seconds)`` call, in order."""
        self.progress_updates: list[tuple[float, Any]] = []
        """Each ``progress(percent, data)`` call, in order."""
        self.logs: list[str] = []
        """Each ``log(message)`` call's text as a job's log keeps it, in order."""

    def _log(self, message: Any) -> None:
        self.logs.append(check_message(message))  # as the engine: a str, cut when too long

    def _extend(self, seconds: float) -> None:
        seconds = check_positive_seconds(seconds, "extend_lease() seconds")  # as the engine
        self.extensions.append(seconds)
        # Like the engine: ``seconds`` more than the lease runs now, at least from now.
        self.lease_expires_at = max(self.lease_expires_at, self._now()) + timedelta(seconds=seconds)

    @property
    def lease_lost(self) -> bool:
        """Always False: nobody else can take a job run by :meth:`QueueFake.run_job`."""
        return False

    def _progress(self, percent: float, data: Any) -> None:
        ok = isinstance(percent, int | float) and not isinstance(percent, bool)
        if not ok or not 0 <= percent <= 100:
            raise BadArgumentError(
                "queue/bad-argument", f"progress() takes a percent in 0..100, got {percent!r}"
            )
        self.progress_updates.append((float(percent), data))


class FakeJobContext(_ContextRecords):
    """Stands in for ``blamequeue.JobContext`` for async handlers run by :meth:`QueueFake.run_job`.

    ``extend_lease``, ``progress`` and ``log`` check their arguments like the real ones and
    record the call in :attr:`extensions` / :attr:`progress_updates` / :attr:`logs`; nothing
    else happens.
    """

    async def extend_lease(self, seconds: float) -> bool:
        """Record the call; returns True (the lease is held) like the real one."""
        self._extend(seconds)
        return True

    async def progress(self, percent: float, data: Any = None) -> None:
        self._progress(percent, data)

    async def log(self, message: str) -> None:
        self._log(message)

    async def dependency_results(self) -> dict[str, Any]:
        """What :meth:`QueueFake.run_job` was given as ``dependency_results`` (``{}``)."""
        return dict(self._dependency_results)


class SyncFakeJobContext(_ContextRecords):
    """Like :class:`FakeJobContext`, with plain methods, for plain ``def`` handlers."""

    def extend_lease(self, seconds: float) -> bool:
        self._extend(seconds)
        return True

    def progress(self, percent: float, data: Any = None) -> None:
        self._progress(percent, data)

    def log(self, message: str) -> None:
        self._log(message)

    def dependency_results(self) -> dict[str, Any]:
        return dict(self._dependency_results)


def _is_async(handler: Callable[..., Any]) -> bool:
    # Decided the way the engine decides which context a handler gets.
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an async __call__ counts
    )


class QueueFake:
    """Replaces a queue's ``enqueue`` / ``enqueue_many`` with recorders while installed.

    Use it as a context manager (sync or async) or call :meth:`install` / :meth:`uninstall`.
    While installed nothing reaches the backend: each call is checked as the real one would
    be (the method's signature, then the engine's own argument and payload checks, raising the
    same ``TypeError`` / ``queue/bad-argument`` / ``queue/bad-payload``), records a
    :class:`Dispatch` per payload and returns a fresh id ``"job-fake-<n>"``.  The queue need not
    be started; which ``backend=`` names exist is not checked.  Everything else on the queue
    works as usual.

    Assertions raise :class:`AssertionError` listing what was dispatched.  Where they take a
    ``predicate`` it is either a callable, given each :class:`Dispatch` and matching when it
    returns something truthy, or any other value, matching dispatches whose payload ``==`` it.
    """

    def __init__(self, queue: Queue, *, clock: Clock | None = None) -> None:
        self.queue = queue
        self.clock = clock
        self.dispatches: list[Dispatch] = []
        """Every recorded dispatch, in call order."""
        self.last_context: FakeJobContext | SyncFakeJobContext | None = None
        """The context given to the handler by the latest :meth:`run_job`."""
        self._ids = itertools.count(1)
        self._saved: dict[str, Any] | None = None
        self._saved_class: type | None = None

    # -- installing -------------------------------------------------------------------------
    @property
    def installed(self) -> bool:
        return self._saved is not None

    def install(self) -> QueueFake:
        """Start recording (idempotent)."""
        if self._saved is not None:
            return self
        queue: Any = self.queue
        originals: dict[str, Any] = {name: getattr(queue, name, None) for name in _PATCHED}
        recorders = {
            "enqueue": self._recorder(originals["enqueue"], many=False),
            "enqueue_many": self._recorder(originals["enqueue_many"], many=True),
            "_enqueue_task": self._record_task,
        }
        instance_dict = getattr(queue, "__dict__", None)
        if instance_dict is not None:
            self._saved = {name: instance_dict.get(name, _MISSING) for name in _PATCHED}
            for name, recorder in recorders.items():
                instance_dict[name] = recorder
        else:
            # A slotted class has no room for instance attributes: swap in a subclass with
            # the same layout whose methods are the recorders.
            cls = type(queue)
            methods = {name: _bound_away(recorder) for name, recorder in recorders.items()}
            fake_cls = type(cls.__name__, (cls,), {"__slots__": (), **methods})
            fake_cls.__qualname__ = cls.__qualname__
            fake_cls.__module__ = cls.__module__
            self._saved = {}
            self._saved_class = cls
            queue.__class__ = fake_cls
        return self

    def uninstall(self) -> None:
        """Stop recording and give the queue its own methods back (idempotent).

        The recorded dispatches stay for assertions.
        """
        if self._saved is None:
            return
        queue: Any = self.queue
        if self._saved_class is not None:
            queue.__class__ = self._saved_class
            self._saved_class = None
        else:
            instance_dict = queue.__dict__
            for name, previous in self._saved.items():
                if previous is _MISSING:
                    instance_dict.pop(name, None)
                else:
                    instance_dict[name] = previous
        self._saved = None

    def __enter__(self) -> QueueFake:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    async def __aenter__(self) -> QueueFake:
        return self.install()

    async def __aexit__(self, *exc_info: object) -> None:
        self.uninstall()

    def _recorder(self, original: Callable[..., Any], *, many: bool) -> Callable[..., Any]:
        try:
            signature: inspect.Signature | None = inspect.signature(original)
        except (TypeError, ValueError):
            signature = None

        async def enqueue(queue_name: str, payload: Any, **options: Any) -> str:
            if signature is not None:
                signature.bind(queue_name, payload, **options)  # TypeError like the real call
            _check_call(queue_name, options)
            dumps(payload)
            return self._record(queue_name, payload, options)

        async def enqueue_many(
            queue_name: str, payloads: Iterable[Any], **options: Any
        ) -> list[str]:
            if signature is not None:
                signature.bind(queue_name, payloads, **options)
            if isinstance(payloads, str | bytes | Mapping) or not isinstance(payloads, Iterable):
                raise BadArgumentError(
                    "queue/bad-argument",
                    f"payloads must be a list of payloads, got {type(payloads).__name__}",
                )
            items = list(payloads)
            refuse_in_batch(options.get("unique_key"), options.get("unique_for"))
            _check_call(queue_name, options)
            for payload in items:  # all or nothing, like the real call
                dumps(payload)
            return [self._record(queue_name, payload, options) for payload in items]

        return enqueue_many if many else enqueue

    async def _record_task(
        self, *, queue_name: str, payload: Any, meta: Mapping[str, Any], **options: Any
    ) -> str:
        # The builder checked every option already; the payload is checked as enqueue would.
        dumps(to_wire(payload))
        # Like enqueue's recorder, only what differs from the defaults is kept.
        given = {k: v for k, v in options.items() if v is not None and v != 0}
        if meta.get(CONTEXT_META_KEY):
            given["context"] = dict(meta[CONTEXT_META_KEY])
        return self._record(queue_name, payload, given, task=meta.get(TASK_META_KEY))

    def _record(
        self,
        queue_name: str,
        payload: Any,
        options: Mapping[str, Any],
        *,
        task: str | None = None,
    ) -> str:
        job_id = self._next_id()
        self.dispatches.append(
            Dispatch(
                queue_name=queue_name,
                payload=payload,
                options=dict(options),
                job_id=job_id,
                task=task,
            )
        )
        return job_id

    def _next_id(self) -> str:
        return f"job-fake-{next(self._ids)}"

    # -- reading ----------------------------------------------------------------------------
    def dispatched(self, queue_name: Target = None, predicate: Predicate = None) -> list[Dispatch]:
        """The recorded dispatches (on ``queue_name``, or of a task when given one; matching
        ``predicate``), in order."""
        return [d for d in self.dispatches if _selects(d, queue_name) and _matches(d, predicate)]

    def clear(self) -> None:
        """Forget every recorded dispatch."""
        self.dispatches.clear()

    # -- asserting --------------------------------------------------------------------------
    def assert_dispatched(
        self, queue_name: Target, predicate: Predicate = None, *, times: int | None = None
    ) -> list[Dispatch]:
        """At least one dispatch on ``queue_name`` matches ``predicate`` (exactly ``times``
        when given).  Returns the matching dispatches."""
        found = self.dispatched(queue_name, predicate)
        what = f"{_where(queue_name)}{_describe_predicate(predicate)}"
        if times is None:
            if not found:
                self._fail(f"expected a dispatch {what}, found none")
        elif len(found) != times:
            self._fail(f"expected {times} dispatch(es) {what}, found {len(found)}")
        return found

    def assert_not_dispatched(self, queue_name: Target, predicate: Predicate = None) -> None:
        """No dispatch on ``queue_name`` matches ``predicate``."""
        found = self.dispatched(queue_name, predicate)
        if found:
            self._fail(
                f"expected no dispatch {_where(queue_name)}{_describe_predicate(predicate)}, "
                f"found {len(found)}"
            )

    def assert_dispatched_times(
        self, queue_name: Target, n: int, predicate: Predicate = None
    ) -> list[Dispatch]:
        """Exactly ``n`` dispatches on ``queue_name`` (matching ``predicate``)."""
        return self.assert_dispatched(queue_name, predicate, times=n)

    def assert_nothing_dispatched(self) -> None:
        """Nothing was dispatched on any queue."""
        if self.dispatches:
            self._fail(f"expected nothing dispatched, found {len(self.dispatches)}")

    def assert_dispatched_with_delay(
        self, queue_name: Target, delay: float, predicate: Predicate = None
    ) -> list[Dispatch]:
        """At least one dispatch on ``queue_name`` (matching ``predicate``) passed ``delay``
        seconds (compared as floats; ``0`` matches a dispatch that passed no delay)."""
        expected = float(delay)
        found = [
            d
            for d in self.dispatched(queue_name, predicate)
            if math.isclose(d.delay, expected, rel_tol=1e-9, abs_tol=1e-9)
        ]
        if not found:
            self._fail(
                f"expected a dispatch {_where(queue_name)}{_describe_predicate(predicate)} "
                f"with delay {expected!r} s, found none"
            )
        return found

    def assert_dispatched_on(
        self, queue_name: Target, predicate: Predicate = None, *, backend: str | None = None
    ) -> list[Dispatch]:
        """At least one dispatch went to ``queue_name`` (matching ``predicate``), and, when
        ``backend`` is given, to that backend (named with ``backend=`` in the call).

        Without ``backend`` it is :meth:`assert_dispatched` under Laravel's
        ``assertPushedOn`` name.
        """
        found = self.dispatched(queue_name, predicate)
        if backend is not None:
            found = [d for d in found if d.backend == backend]
        if not found:
            on_backend = f" on backend {backend!r}" if backend is not None else ""
            self._fail(
                f"expected a dispatch {_where(queue_name)}{on_backend}"
                f"{_describe_predicate(predicate)}, found none"
            )
        return found

    def _fail(self, message: str) -> None:
        if not self.dispatches:
            raise AssertionError(f"{message}; nothing was dispatched")
        lines = [d.describe() for d in self.dispatches[:_SHOWN]]
        if len(self.dispatches) > _SHOWN:
            lines.append(f"... and {len(self.dispatches) - _SHOWN} more")
        listing = "\n  ".join(lines)
        raise AssertionError(f"{message}; dispatched:\n  {listing}")

    # -- running handlers -------------------------------------------------------------------
    def _now(self) -> datetime:
        if self.clock is not None:
            return datetime.fromtimestamp(self.clock.now(), tz=UTC)
        return datetime.now(UTC)

    def make_job(
        self,
        payload: Any,
        *,
        queue_name: str = "default",
        attempts: int = 1,
        max_attempts: int = 5,
        priority: int = 0,
        classification: str | None = None,
        trace_id: str | None = None,
        last_error: str | None = None,
    ) -> Job:
        """A :class:`blamequeue.Job` as a handler would receive it (the payload goes through a
        JSON round trip, so tuples arrive as lists, as they would from a backend)."""
        now = self._now()
        return Job(
            id=self._next_id(),
            queue=queue_name,
            payload=json.loads(dumps(payload)),
            priority=priority,
            attempts=attempts,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            created_at=now,
            available_at=now,
            last_error=last_error,
        )

    async def run_job(
        self,
        handler: Callable[..., Any],
        payload: Any,
        *,
        queue_name: str = "default",
        attempts: int = 1,
        max_attempts: int = 5,
        lease: float = 30.0,
        dependency_results: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run ``handler(job, ctx)`` once, directly (no backend, no retries) and return its
        result.  ``handler`` may also be a task (a ``Task`` subclass or a ``@task`` function):
        its handler then gets ``payload`` as a dispatch would deliver it.  An async handler
        gets a :class:`FakeJobContext` and is awaited; a plain
        ``def`` handler is called with a :class:`SyncFakeJobContext`.  The context is kept in
        :attr:`last_context`; its ``dependency_results()`` answers ``dependency_results``
        (a flow child's view of its dependencies' results, ``{}`` by default)."""
        if _task_name(handler) is not None:
            entry = RegisteredTask.of(cast(Any, handler))
            handler = entry.job_handler()
            job = self.make_job(
                to_wire(payload),
                queue_name=queue_name,
                attempts=attempts,
                max_attempts=max_attempts,
            )
            job = attrs.evolve(job, task=entry.settings.name)
        else:
            job = self.make_job(
                payload, queue_name=queue_name, attempts=attempts, max_attempts=max_attempts
            )
        expires = job.available_at + timedelta(seconds=lease)
        if _is_async(handler):
            context = FakeJobContext(job, expires, self._now, dependency_results)
            self.last_context = context
            return await handler(job, context)
        sync_context = SyncFakeJobContext(job, expires, self._now, dependency_results)
        self.last_context = sync_context
        result = handler(job, sync_context)
        if inspect.isawaitable(result):  # e.g. a lambda returning a coroutine
            result = await result
        return result

    async def expect_job_to_fail(
        self,
        handler: Callable[..., Any],
        payload: Any,
        exc_type: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        *,
        queue_name: str = "default",
        attempts: int = 1,
        max_attempts: int = 5,
    ) -> BaseException:
        """Run the handler like :meth:`run_job` and assert that it raises ``exc_type``;
        return the exception.  A normal return, or another exception, is an
        :class:`AssertionError` (chained to the unexpected exception)."""
        expected = exc_type if isinstance(exc_type, tuple) else (exc_type,)
        names = " or ".join(t.__name__ for t in expected)
        try:
            result = await self.run_job(
                handler,
                payload,
                queue_name=queue_name,
                attempts=attempts,
                max_attempts=max_attempts,
            )
        except expected as exc:
            return exc
        except Exception as exc:
            raise AssertionError(
                f"expected the handler to raise {names}, it raised {type(exc).__name__}: {exc}"
            ) from exc
        raise AssertionError(f"expected the handler to raise {names}, it returned {result!r}")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _bound_away(function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a closure so that, set on a class, it ignores the instance it is bound to."""

    async def method(_self: Any, *args: Any, **kwargs: Any) -> Any:
        return await function(*args, **kwargs)

    method.__name__ = getattr(function, "__name__", "method")
    return method
