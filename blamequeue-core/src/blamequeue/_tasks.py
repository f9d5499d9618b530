"""Named job types (tasks): declared once with their queue and retry settings, dispatched by
name or by reference, and run by workers that look the name up in their queue's registry.

A task travels as an ordinary job: its payload is the task's payload (dataclasses, attrs classes
and pydantic models are turned into JSON on dispatch and back on the worker), and the core-owned
job ``meta`` carries the task name and any ``with_context`` values.  The names are checked when
a job is dispatched, so a typo fails at the call site instead of in a worker's dead-letter queue.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import inspect
import json
import math
import pkgutil
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, overload

import anyio
import attrs

from ._backoff import Backoff, BackoffFunction, BackoffOption, parse_backoff, parse_backoff_option
from ._codec import dumps
from ._context import JobContext, LeaseState, SyncJobContext
from ._ids import new_job_id
from ._job_ids import check_chosen_id, check_lifo
from ._job_seals import CONTEXT_META_KEY, TASK_META_KEY
from ._models import Job
from ._suggest import did_you_mean
from ._validation import (
    check_delay,
    check_max_attempts,
    check_positive_seconds,
    check_priority,
    check_queue_name,
)
from .errors import BadArgumentError, ConfigError, NotFoundError, QueueError

if TYPE_CHECKING:
    from ._runtime import BackendRuntime
    from .abc import Clock

__all__ = ["FunctionTask", "PendingDispatch", "Task", "TaskRegistry", "task"]

P = TypeVar("P")
R = TypeVar("R")


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


def check_timeout(value: Any) -> float | None:
    if value is None:
        return None
    return check_positive_seconds(value, "timeout")


def _task_name(value: Any) -> str:
    return check_queue_name(value, "task name")


def _queue_name(value: Any) -> str:
    return check_queue_name(value, "queue")


@attrs.frozen(kw_only=True)
class TaskSettings:
    """What a task declares: where its jobs go and how they are retried."""

    name: str = attrs.field(converter=_task_name)
    queue: str = attrs.field(default="default", converter=_queue_name)
    tries: int | None = attrs.field(default=None, converter=check_max_attempts)
    timeout: float | None = attrs.field(default=None, converter=check_timeout)
    backoff: BackoffOption | None = attrs.field(default=None)
    """A backoff spec (stored in each job dispatched) or a function (kept here: a function
    cannot travel inside a job)."""
    priority: int = attrs.field(default=0, converter=check_priority)
    payload_type: type | None = None

    @backoff.validator
    def _check_backoff(self, _attribute: Any, value: Any) -> None:
        parse_backoff_option(value, where=f"task {self.name!r}: backoff")

    @property
    def backoff_function(self) -> BackoffFunction | None:
        """The task's backoff when it is a function (used by the worker), else ``None``."""
        parsed = parse_backoff_option(self.backoff)
        return None if parsed is None or isinstance(parsed, Backoff) else parsed

    @property
    def backoff_spec(self) -> Any:
        """The task's backoff as a job stores it (``None`` when it is a function)."""
        return None if self.backoff_function is not None else self.backoff


def to_wire(payload: Any) -> Any:
    """A task payload as JSON-ready data: structured objects become plain mappings."""
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        return dataclasses.asdict(payload)
    if attrs.has(type(payload)):
        return attrs.asdict(payload)
    dump = getattr(payload, "model_dump", None)
    if callable(dump):  # pydantic v2, without importing it
        return dump(mode="json")
    return payload


def from_wire(data: Any, payload_type: type | None) -> Any:
    """Rebuild the declared payload type from what :func:`to_wire` stored."""
    if payload_type is None or isinstance(data, payload_type):
        return data
    validate = getattr(payload_type, "model_validate", None)
    if callable(validate):
        return validate(data)
    if (dataclasses.is_dataclass(payload_type) or attrs.has(payload_type)) and isinstance(
        data, Mapping
    ):
        return payload_type(**data)
    return data


def _structured(candidate: Any) -> type | None:
    """``candidate`` when it is a class a payload can be rebuilt as, else None."""
    if not isinstance(candidate, type):
        return None
    if (
        dataclasses.is_dataclass(candidate)
        or attrs.has(candidate)
        or callable(getattr(candidate, "model_validate", None))
    ):
        return candidate
    return None


class Task(abc.ABC, Generic[P]):
    """Base class of a named job type.  Subclass it, set the class attributes, write
    ``handle``, and register the class on a :class:`~blamequeue.Queue`::

        class SendWelcomeEmail(blamequeue.Task[Welcome]):
            queue = "emails"
            tries = 5
            timeout = 30
            backoff = [10, 30, 60]

            async def handle(self, payload: Welcome, ctx: blamequeue.JobContext) -> None:
                ...

        queue.register(SendWelcomeEmail)
        await SendWelcomeEmail.dispatch(Welcome(email="ada@example.com"))

    ``handle`` may be a plain ``def`` (it then runs in a worker thread with a context of plain
    calls, like any synchronous handler).  The worker makes a fresh instance per job.  The
    payload type is read from ``Task[...]``: dataclasses, attrs classes and pydantic models
    are sent as JSON and rebuilt before ``handle`` sees them.
    """

    name: ClassVar[str | None] = None
    """Defaults to the class name."""
    queue: ClassVar[str] = "default"
    tries: ClassVar[int | None] = None
    """Attempts before the dead-letter queue; None uses the backend's ``max_attempts``."""
    timeout: ClassVar[float | None] = None
    """Seconds an attempt may run before it is cancelled and counted as failed."""
    backoff: ClassVar[BackoffOption | None] = None
    """A list of seconds, a backoff spec (see :mod:`blamequeue`'s ``Backoff``), or a function
    ``(attempt, error) -> seconds``."""
    priority: ClassVar[int] = 0

    _registries: ClassVar[list[TaskRegistry]]

    @abc.abstractmethod
    def handle(self, payload: P, ctx: Any) -> Any:
        """Run one job of this task (``async def`` or plain ``def``)."""

    @classmethod
    def settings(cls) -> TaskSettings:
        """The task's declared settings, checked."""
        payload_type = None
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is Task:
                (argument,) = typing.get_args(base)
                payload_type = _structured(argument)
        try:
            return TaskSettings(
                name=cls.name or cls.__name__,
                queue=cls.queue,
                tries=cls.tries,
                timeout=cls.timeout,
                backoff=cls.backoff,
                priority=cls.priority,
                payload_type=payload_type,
            )
        except QueueError as exc:
            raise ConfigError(
                "queue/invalid-config", f"task {cls.__name__}: {exc.message}"
            ) from exc

    @classmethod
    def _dispatch_target_of(cls) -> tuple[TaskRegistry, TaskSettings]:
        registries = cls.__dict__.get("_registries") or []
        if not registries:
            raise QueueError(
                "queue/not-initialized",
                f"task {cls.__name__} is not registered on a Queue; call "
                f"queue.register({cls.__name__}) before dispatching it",
            )
        registry = registries[-1]
        return registry, registry.get(cls.settings().name).settings

    # Class-level dispatch: ``SendWelcomeEmail.dispatch(payload)``.
    @classmethod
    def pending(cls, payload: P) -> PendingDispatch:
        """A builder for one job of this task, to set more options before dispatching."""
        registry, settings = cls._dispatch_target_of()
        return PendingDispatch(registry=registry, settings=settings, payload=payload)

    @classmethod
    async def dispatch(cls, payload: P) -> str:
        """Enqueue one job of this task on the Queue it is registered on; returns its id."""
        return await cls.pending(payload).dispatch()

    @classmethod
    async def dispatch_if(cls, condition: object, payload: P) -> str | None:
        """Dispatch when ``condition`` is true; returns the job id, or None."""
        return await cls.pending(payload).dispatch_if(condition)

    @classmethod
    async def dispatch_unless(cls, condition: object, payload: P) -> str | None:
        """Dispatch when ``condition`` is false; returns the job id, or None."""
        return await cls.pending(payload).dispatch_unless(condition)

    @classmethod
    async def dispatch_after(cls, seconds: float, payload: P) -> str:
        """Enqueue one job that becomes due ``seconds`` from now."""
        return await cls.pending(payload).delay(seconds).dispatch()

    @classmethod
    async def dispatch_now(cls, payload: P) -> Any:
        """Run the task here and now, without the queue; returns what ``handle`` returns."""
        return await cls.pending(payload).dispatch_now()


class FunctionTask(Generic[P, R]):
    """A task declared by decorating a handler function (``@queue.task`` or
    ``@blamequeue.task``).  Calling it calls the function."""

    def __init__(self, function: Callable[[P, Any], R], settings: TaskSettings) -> None:
        self.function = function
        self.settings = settings
        self._registries: list[TaskRegistry] = []
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", settings.name)

    def __call__(self, payload: P, ctx: Any) -> R:
        return self.function(payload, ctx)

    def __repr__(self) -> str:
        return f"<task {self.settings.name!r} on queue {self.settings.queue!r}>"

    def _dispatch_target(self) -> tuple[TaskRegistry, TaskSettings]:
        if not self._registries:
            raise QueueError(
                "queue/not-initialized",
                f"task {self.settings.name!r} is not registered on a Queue; register it with "
                f"queue.register(...) or declare it with @queue.task",
            )
        return self._registries[-1], self.settings

    def pending(self, payload: P) -> PendingDispatch:
        registry, settings = self._dispatch_target()
        return PendingDispatch(registry=registry, settings=settings, payload=payload)

    async def dispatch(self, payload: P) -> str:
        """Enqueue one job of this task; returns the job id."""
        return await self.pending(payload).dispatch()

    async def dispatch_if(self, condition: object, payload: P) -> str | None:
        """Dispatch when ``condition`` is true; returns the job id, or None."""
        return await self.pending(payload).dispatch_if(condition)

    async def dispatch_unless(self, condition: object, payload: P) -> str | None:
        """Dispatch when ``condition`` is false; returns the job id, or None."""
        return await self.pending(payload).dispatch_unless(condition)

    async def dispatch_after(self, seconds: float, payload: P) -> str:
        """Enqueue one job that becomes due ``seconds`` from now."""
        return await self.pending(payload).delay(seconds).dispatch()

    async def dispatch_now(self, payload: P) -> Any:
        """Run the task here and now, without the queue; returns what the handler returns."""
        return await self.pending(payload).dispatch_now()


def _function_settings(function: Callable[..., Any], **declared: Any) -> TaskSettings:
    if not callable(function):
        raise _bad(f"@task decorates a handler function (payload, ctx), got {function!r}")
    payload_type = declared.pop("payload_type", None)
    if payload_type is None:
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # unresolvable annotations just mean "untyped"
            hints = {}
        parameters = list(inspect.signature(function).parameters)
        if parameters:
            payload_type = _structured(hints.get(parameters[0]))
    name = declared.pop("name", None) or getattr(function, "__name__", None)
    try:
        return TaskSettings(name=name, payload_type=payload_type, **declared)
    except QueueError as exc:
        raise _bad(f"task {name!r}: {exc.message}") from exc


@overload
def task(function: Callable[[P, Any], R], /) -> FunctionTask[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    queue: str = "default",
    tries: int | None = None,
    timeout: float | None = None,
    backoff: BackoffOption | None = None,
    priority: int = 0,
    payload_type: type | None = None,
) -> Callable[[Callable[[P, Any], R]], FunctionTask[P, R]]: ...


def task(function: Any = None, /, **declared: Any) -> Any:
    """Declare a function as a task without a Queue yet (for modules found by
    :meth:`TaskRegistry.discover`); ``@queue.task`` declares and registers at once."""

    def declare(target: Callable[[P, Any], R]) -> FunctionTask[P, R]:
        return FunctionTask(target, _function_settings(target, **declared))

    return declare(function) if function is not None else declare


@attrs.frozen
class RegisteredTask:
    """One entry of a registry: the settings, and how to make the handler of one job."""

    settings: TaskSettings
    target: type[Task[Any]] | FunctionTask[Any, Any]

    @classmethod
    def of(cls, target: type[Task[Any]] | FunctionTask[Any, Any]) -> RegisteredTask:
        """The entry for a task class or function, registered or not."""
        if isinstance(target, FunctionTask):
            return cls(settings=target.settings, target=target)
        if _is_task_class(target):
            return cls(settings=target.settings(), target=target)
        raise ConfigError(
            "queue/invalid-config",
            f"expected a blamequeue.Task subclass with a handle() method or a function "
            f"declared with @task, got {target!r}",
        )

    def job_handler(self) -> Callable[[Job, Any], Any]:
        """A consume-style ``handler(job, ctx)`` running this task on one job: the payload is
        rebuilt as the declared type, and a fresh instance of a task class handles it."""
        target = self.target
        handle = target.function if isinstance(target, FunctionTask) else target().handle
        payload_type = self.settings.payload_type
        if inspect.iscoroutinefunction(handle):

            async def run_async(job: Job, ctx: Any) -> Any:
                return await handle(from_wire(job.payload, payload_type), ctx)

            return run_async

        def run_sync(job: Job, ctx: Any) -> Any:
            return handle(from_wire(job.payload, payload_type), ctx)

        return run_sync


def _where(target: object) -> str:
    """``module:qualname`` of a task class or function, for messages and to tell a module
    imported again (the same place) from a second task of the same name."""
    function = target.function if isinstance(target, FunctionTask) else target
    module = getattr(function, "__module__", "?")
    return f"{module}:{getattr(function, '__qualname__', repr(function))}"


def _is_task_class(candidate: object) -> bool:
    return (
        isinstance(candidate, type)
        and issubclass(candidate, Task)
        and candidate is not Task
        and "handle" in {n for k in candidate.__mro__ if k is not Task for n in vars(k)}
    )


class TaskQueue(Protocol):
    """What tasks need of the queue they are registered on (a :class:`~blamequeue.Queue`):
    its clock, a backend's runtime, and enqueueing a task job."""

    @property
    def clock(self) -> Clock: ...
    def _runtime(self, backend: str | None) -> BackendRuntime: ...
    async def _dispatch_task(self, options: Mapping[str, Any]) -> str: ...


class TaskRegistry:
    """The tasks a :class:`~blamequeue.Queue` knows, by name (``queue.tasks``).

    Pass it as the handler of ``consume`` / ``tick`` (or to ``blamequeue worker``) and each
    job runs the task its name points at::

        await queue.consume("emails", queue.tasks, concurrency=20)
    """

    def __init__(self, queue: TaskQueue) -> None:
        self._queue = queue
        self._tasks: dict[str, RegisteredTask] = {}

    @property
    def queue(self) -> TaskQueue:
        return self._queue

    def register(self, target: Any) -> Any:
        """Register a :class:`Task` subclass or a :class:`FunctionTask`; returns it, so it
        works as a class decorator.  Registering the same task twice is a no-op; a second,
        different task under a taken name is ``queue/invalid-config``."""
        entry = RegisteredTask.of(target)
        settings = entry.settings
        existing = self._tasks.get(settings.name)
        if (
            existing is not None
            and existing.target is not target
            and _where(existing.target) != _where(target)  # else: its module imported again
        ):
            raise ConfigError(
                "queue/invalid-config",
                f"two different tasks are named {settings.name!r} on this queue: "
                f"{_where(existing.target)} (registered first) and {_where(target)}; give one "
                f"of them another name (@task(name=...), or a class's `name`)",
            )
        self._tasks[settings.name] = entry
        registries = target._registries if isinstance(target, FunctionTask) else None
        if registries is None:
            registries = target.__dict__.get("_registries")
            if registries is None:
                registries = []
                target._registries = registries
        if self in registries:
            registries.remove(self)
        registries.append(self)
        return target

    def detach(self) -> None:
        """Stop being where the registered tasks dispatch (the queue shut down for good): each
        task then dispatches through the registry it was registered in before this one, or
        says it is registered on no running queue.  The tasks stay listed here."""
        for entry in self._tasks.values():
            target = entry.target
            registries = (
                target._registries
                if isinstance(target, FunctionTask)
                else target.__dict__.get("_registries")
            )
            if registries is not None and self in registries:
                registries.remove(self)

    def get(self, name: str) -> RegisteredTask:
        """The task registered as ``name``; ``queue/unknown-job`` (with the closest names)
        when there is none."""
        found = self._tasks.get(name) if isinstance(name, str) else None
        if found is not None:
            return found
        guess = did_you_mean(str(name), self._tasks, n=3)
        hint = f"; {guess}" if guess else ""
        known = ", ".join(sorted(self._tasks)) or "none"
        raise NotFoundError(
            "queue/unknown-job",
            f"no task named {name!r} is registered on this queue (registered: {known}){hint} "
            f"Register it with queue.register(...) or @queue.task before dispatching it",
        )

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    def on_queue(self, queue_name: str) -> list[str]:
        """Names of the tasks whose jobs go to ``queue_name``."""
        return sorted(n for n, t in self._tasks.items() if t.settings.queue == queue_name)

    def discover(self, package: str) -> list[str]:
        """Import every module of ``package`` (recursively) and register the tasks defined
        there: :class:`Task` subclasses and functions declared with ``@blamequeue.task``.
        Returns the names registered, sorted."""
        try:
            root = importlib.import_module(package)
        except ImportError as exc:
            raise ConfigError(
                "queue/invalid-config", f"cannot import task package {package!r}: {exc}"
            ) from exc
        modules = [root]
        for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=f"{package}."):
            modules.append(importlib.import_module(info.name))
        found: list[str] = []
        for module in modules:
            for value in list(vars(module).values()):
                defined_here = getattr(value, "__module__", None) == module.__name__
                if isinstance(value, FunctionTask) or (defined_here and _is_task_class(value)):
                    self.register(value)
                    found.append(
                        value.settings.name
                        if isinstance(value, FunctionTask)
                        else value.settings().name
                    )
        return sorted(set(found))

    def handler_for(self, job: Job) -> Callable[[Job, Any], Any]:
        """The consume-style handler for one task job."""
        return self.task_for(job).job_handler()

    def task_for(self, job: Job) -> RegisteredTask:
        """The registered task a task job runs (used by the worker)."""
        if job.task is None:
            raise NotFoundError(
                "queue/unknown-job",
                f"job {job.id} was enqueued with enqueue(), not dispatched as a task, so it has "
                f"no task name; consume queue {job.queue!r} with a plain handler, or dispatch "
                f"tasks to it",
            )
        return self.get(job.task)

    # The registry is itself a handler, so ``consume(queue_name, queue.tasks)`` works even on
    # code paths that do not resolve per job.
    async def __call__(self, job: Job, ctx: Any) -> Any:
        handler = self.handler_for(job)
        result = handler(job, ctx)
        return await result if inspect.isawaitable(result) else result


@attrs.frozen(kw_only=True)
class PendingDispatch:
    """A task job being put together: ``queue.job("SendWelcomeEmail", payload)`` and the
    fluent setters, then ``dispatch()``.  Each setter checks its argument at once and
    returns a new builder (a half-built one can be reused)."""

    registry: TaskRegistry
    settings: TaskSettings
    payload: Any
    queue_name: str | None = None
    delay_seconds: float = 0.0
    max_attempts: int | None = None
    timeout_seconds: float | None = None
    backoff_spec: Any = None
    priority_value: int | None = None
    context: Mapping[str, Any] = attrs.field(factory=dict)
    backend: str | None = None
    chosen_id: str | None = None
    lifo_order: bool = False

    def on_queue(self, queue_name: str) -> PendingDispatch:
        return attrs.evolve(self, queue_name=check_queue_name(queue_name))

    def delay(self, seconds: float) -> PendingDispatch:
        return attrs.evolve(self, delay_seconds=check_delay(seconds))

    def tries(self, attempts: int) -> PendingDispatch:
        return attrs.evolve(self, max_attempts=check_max_attempts(attempts))

    def timeout(self, seconds: float) -> PendingDispatch:
        return attrs.evolve(self, timeout_seconds=check_timeout(seconds))

    def backoff(self, spec: Any) -> PendingDispatch:
        parse_backoff(spec)
        return attrs.evolve(self, backoff_spec=spec)

    def priority(self, value: int) -> PendingDispatch:
        return attrs.evolve(self, priority_value=check_priority(value))

    def job_id(self, value: str) -> PendingDispatch:
        """The job's id, chosen by the caller (``Queue.enqueue``'s ``job_id``): dispatching
        an id the backend already holds stores nothing and returns it."""
        return attrs.evolve(self, chosen_id=check_chosen_id(value))

    def lifo(self, value: bool = True) -> PendingDispatch:
        """Lease the job ahead of the due jobs of its priority already waiting
        (``Queue.enqueue``'s ``lifo``)."""
        return attrs.evolve(self, lifo_order=check_lifo(value))

    def on_backend(self, name: str) -> PendingDispatch:
        return attrs.evolve(self, backend=name)

    def with_context(self, **values: Any) -> PendingDispatch:
        """Extra values for the handler (``ctx.job.context``), e.g. the user who asked."""
        return attrs.evolve(self, context={**self.context, **values})

    def _options(self) -> dict[str, Any]:
        settings = self.settings
        meta: dict[str, Any] = {TASK_META_KEY: settings.name}
        if self.context:
            meta[CONTEXT_META_KEY] = dict(self.context)
        return {
            "queue_name": self.queue_name or settings.queue,
            "payload": self.payload,
            "backend": self.backend,
            "priority": settings.priority if self.priority_value is None else self.priority_value,
            "delay": self.delay_seconds,
            "max_attempts": self.max_attempts if self.max_attempts is not None else settings.tries,
            "backoff": self.backoff_spec
            if self.backoff_spec is not None
            else settings.backoff_spec,
            "timeout": self.timeout_seconds
            if self.timeout_seconds is not None
            else settings.timeout,
            "meta": meta,
            "chosen_id": self.chosen_id,
            "lifo": self.lifo_order,
        }

    async def dispatch(self) -> str:
        """Enqueue the job; returns its id."""
        self.registry.get(self.settings.name)  # still registered?
        return await self.registry.queue._dispatch_task(self._options())

    async def dispatch_if(self, condition: object) -> str | None:
        return await self.dispatch() if condition else None

    async def dispatch_unless(self, condition: object) -> str | None:
        return None if condition else await self.dispatch()

    async def dispatch_now(self) -> Any:
        """Run the handler in this task now, without storing a job; returns its result.

        The handler gets a job with a fresh id (attempt 1 of 1) and a context whose
        ``extend_lease`` always succeeds; exceptions propagate to the caller."""
        options = self._options()
        queue = self.registry.queue
        runtime = queue._runtime(self.backend)
        wire = json.loads(dumps(to_wire(options["payload"])))
        now = queue.clock.now()
        job = Job(
            id=new_job_id(),
            queue=options["queue_name"],
            payload=wire,
            priority=options["priority"],
            attempts=1,
            max_attempts=1,
            classification=None,
            trace_id=None,
            created_at=datetime.fromtimestamp(now, UTC),
            available_at=datetime.fromtimestamp(now, UTC),
            last_error=None,
            task=self.settings.name,
            context=dict(self.context),
        )
        context = _InlineContext(job, LeaseState(job.id, "inline", math.inf), runtime)
        handler = self.registry.handler_for(job)
        if inspect.iscoroutinefunction(handler):
            call: Awaitable[Any] = handler(job, context)
            timeout = options["timeout"]
            if timeout is None:
                return await call
            with anyio.fail_after(timeout):
                return await call
        sync_context = SyncJobContext(context)
        return await anyio.to_thread.run_sync(lambda: handler(job, sync_context))


class _InlineContext(JobContext):
    """The context of ``dispatch_now``: no lease to keep."""

    async def extend_lease(self, seconds: float) -> bool:
        return True
