"""The fixtures and helpers every conformance test shares.

A test gets :class:`Conformance` (fixture ``conformance``): a started queue on the backend under
test (named :data:`BACKEND`), the :class:`~blamequeue_testing.VirtualClock` that drives it, an
audit recorder, a queue name of its own and the backend's capabilities.  Time moves only when a
test advances the clock; waits for other tasks are bounded by :func:`anyio.fail_after` as a
safety net, never as a timed assertion.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from blamequeue import AuditEvent, Job, JobContext, Queue
from blamequeue._plugins import load_registry
from blamequeue.abc import Capabilities
from blamequeue_testing._clock import VirtualClock
from blamequeue_testing._memory import MemoryBackend

__all__ = [
    "BACKEND",
    "SAFETY_NET",
    "AuditRecorder",
    "Conformance",
    "QueueFactory",
    "anyio_backend",
    "backend_capabilities",
    "conformance",
    "conformance_audit",
    "conformance_clock",
    "conformance_queue",
    "conformance_queue_factory",
    "fail",
    "succeed",
    "wait_for",
    "wait_until",
]

BACKEND = "conf"
"""The name the suite gives the backend under test in ``Queue(backends=...)``."""

SAFETY_NET = 10.0
"""Real seconds after which a wait for another task is declared hung (never reached when the
backend behaves; it is not a timing assertion)."""

_SHUTDOWN_TIMEOUT = 5.0


class AuditRecorder:
    """An audit sink that keeps every event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[AuditEvent]:
        return [event for event in self.events if event.name == name]


def _backend_class(config: Mapping[str, Any]) -> object:
    """The backend class registered for ``config["protocol"]`` (None when there is none)."""
    registration = load_registry().protocols.get(config.get("protocol"))  # type: ignore[arg-type]
    return getattr(registration, "value", None)


def backend_capabilities(config: Mapping[str, Any]) -> Capabilities:
    """The capabilities the backend class registered for ``config["protocol"]`` declares."""
    caps = getattr(_backend_class(config), "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


def _keeps_a_store_per_backend(config: Mapping[str, Any]) -> bool:
    """True for a ``memory`` config without a ``namespace``: each backend built from it would
    hold a store of its own, so a second queue of the test would not see the first one's jobs."""
    backend = _backend_class(config)
    return (
        isinstance(backend, type)
        and issubclass(backend, MemoryBackend)
        and config.get("namespace") is None
    )


class QueueFactory:
    """Builds queues on the backend under test, all driven by the same clock and recorder.

    Every queue it builds for one test sees one store, as workers on one database do: a durable
    backend's config already says so (same file, same server); a ``memory`` config without a
    ``namespace`` gets one of the test's own, dropped when the test ends, so the default
    ``{"protocol": "memory"}`` needs nothing more.  Queues it built and a test left running are
    shut down when the test ends.
    """

    def __init__(
        self, config: Mapping[str, Any], clock: VirtualClock, audit: AuditRecorder
    ) -> None:
        self.config = dict(config)
        """The backend config every queue is built from (``bq_backend_config``, plus the
        namespace given to a ``memory`` config that has none)."""
        self.clock = clock
        self.audit = audit
        self._built: list[Queue] = []
        self._namespace: str | None = None
        if _keeps_a_store_per_backend(self.config):
            self._namespace = f"conformance-{uuid.uuid4().hex}"
            self.config["namespace"] = self._namespace

    def build(self, *, sweep_interval: float = 0, **overrides: Any) -> Queue:
        """A new, not yet started queue; ``overrides`` replace keys of the backend config.

        No sweep timer unless ``sweep_interval`` asks for one (it runs on the virtual clock).
        """
        queue = Queue(
            backends={BACKEND: {**self.config, **overrides}},
            clock=self.clock,
            sweep_interval=sweep_interval,
            audit_sinks=[self.audit],
        )
        self._built.append(queue)
        return queue

    @asynccontextmanager
    async def open(self, *, sweep_interval: float = 0, **overrides: Any) -> AsyncIterator[Queue]:
        """A started queue from :meth:`build`, shut down on exit."""
        queue = self.build(sweep_interval=sweep_interval, **overrides)
        await queue.start()
        try:
            yield queue
        finally:
            await queue.shutdown(timeout=_SHUTDOWN_TIMEOUT)

    async def aclose(self) -> None:
        try:
            for queue in reversed(self._built):
                await queue.shutdown(timeout=_SHUTDOWN_TIMEOUT)  # a no-op unless left running
        finally:
            if self._namespace is not None:
                # The namespace was the test's own; its jobs would otherwise outlive it.
                MemoryBackend.forget_namespace(self._namespace)


class Conformance:
    """What a conformance test works with (fixture ``conformance``)."""

    def __init__(
        self,
        *,
        queue: Queue,
        clock: VirtualClock,
        audit: AuditRecorder,
        factory: QueueFactory,
        capabilities: Capabilities,
    ) -> None:
        self.queue = queue
        """Started, on the backend under test (named :data:`BACKEND`), no sweep timer."""
        self.clock = clock
        self.audit = audit
        self.factory = factory
        self.capabilities = capabilities
        self.name = f"conformance-{uuid.uuid4().hex[:12]}"
        """A queue name no other test uses (backends may be shared between tests)."""

    @classmethod
    def of(cls, queue: Queue, factory: QueueFactory) -> Conformance:
        """The conformance object of ``queue``, built by ``factory``: its clock, its audit
        recorder and the capabilities of the backend its config names."""
        return cls(
            queue=queue,
            clock=factory.clock,
            audit=factory.audit,
            factory=factory,
            capabilities=backend_capabilities(factory.config),
        )

    # -- capabilities ----------------------------------------------------------------------
    def require(self, flag: str, why: str) -> None:
        """Skip the test, saying so, when the backend lacks capability ``flag`` (a facet it
        does not inherit, or a trait it does not have)."""
        if not getattr(self.capabilities, flag):
            pytest.skip(f"backend lacks {flag} (see its facets and traits): {why}")

    def require_virtual_leases(self) -> None:
        """Skip when the store keeps lease time itself, so the virtual clock cannot expire it."""
        if self.capabilities.store_clock:
            pytest.skip(
                "backend declares store_clock=True: its store expires leases on its own clock, "
                "which the virtual clock of this suite cannot move"
            )

    def require_default(self, key: str) -> None:
        """Skip a test of a built-in default when the backend config under test sets ``key``."""
        if key in self.factory.config:
            pytest.skip(f"bq_backend_config sets {key!r}; this test checks its default")

    def require_virtual_time(self, why: str) -> None:
        """Skip when the store keeps time itself (``store_clock``: SQS's visibility timeouts
        and delay timers), so moving the virtual clock does not make a job due."""
        if self.capabilities.store_clock:
            pytest.skip(
                f"backend declares store_clock=True: its store keeps retry delays and delays on "
                f"its own clock, which the virtual clock of this suite cannot move ({why})"
            )

    def require_retained_done_jobs(self) -> None:
        """Skip when completing a job deletes it from the store (SQS deletes the message)."""
        if not self.capabilities.keeps_done:
            pytest.skip(
                "backend declares keeps_done=False: its store (a message queue) deletes a "
                "job's message when it completes, so no done job is retained"
            )

    # -- time ------------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def advance_to(self, when: float) -> None:
        """Move the clock to exactly ``when`` (``now + (when - now)`` is exact in floats)."""
        self.clock.advance(max(0.0, when - self.clock.now()))

    # -- queue shortcuts -------------------------------------------------------------------
    async def size(self) -> int:
        return await self.queue.size(self.name)

    async def dlq_size(self) -> int:
        return await self.queue.dlq_size(self.name)

    async def leasable(self) -> int:
        """How many jobs a tick leases now (each is completed)."""
        result = await self.queue.tick(self.name, succeed, max=1000)
        return result.leased

    async def shares_store(self, first: Queue, second: Queue) -> bool:
        """Whether ``second`` sees a job ``first`` enqueues (both started, built by
        :attr:`factory`); the probe job is purged again."""
        probe = f"{self.name}-probe"
        await first.enqueue(probe, None)
        seen = await second.size(probe)
        await first.purge(probe)
        return seen == 1

    async def require_shared_store(self, first: Queue, second: Queue) -> None:
        """Skip, saying why, unless two queues built from the backend config see one store.

        A test that stands a second queue in for another process (another worker, the CLI, a
        scheduler coming back) calls this first.  True of every durable backend (same file,
        same server) and of ``memory`` (:class:`QueueFactory` gives it a namespace); a backend
        that keeps a store per ``Queue`` skips these tests instead of failing them.
        """
        if not await self.shares_store(first, second):
            pytest.skip(
                "two Queue objects built from bq_backend_config do not share one store, and "
                "this test looks at it through a second queue standing in for another process; "
                "give the config what makes them share one (the same file, server or namespace)"
            )


async def succeed(job: Job, ctx: JobContext) -> None:
    """A handler that completes every job."""


async def fail(job: Job, ctx: JobContext) -> None:
    """A handler that fails every job."""
    raise RuntimeError(f"conformance failure of {job.id}")


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Yield to other tasks (and threads) until ``predicate()`` holds."""
    spins = 0
    try:
        with anyio.fail_after(SAFETY_NET):
            while not predicate():
                spins += 1
                # Checkpoints first; a backend working in a thread gets a little real time.
                await anyio.sleep(0 if spins < 200 else 0.001)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


async def wait_for(event: anyio.Event, what: str) -> None:
    """Wait for ``event``; a backend that never delivers fails the test instead of hanging."""
    try:
        with anyio.fail_after(SAFETY_NET):
            await event.wait()
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every conformance test runs on asyncio and on trio."""
    return str(request.param)


@pytest.fixture
def conformance_clock() -> VirtualClock:
    """The virtual clock driving the conformance queues."""
    return VirtualClock()


@pytest.fixture
def conformance_audit() -> AuditRecorder:
    """Records the audit events of the conformance queues."""
    return AuditRecorder()


@pytest.fixture
async def conformance_queue_factory(
    bq_backend_config: Mapping[str, Any],
    conformance_clock: VirtualClock,
    conformance_audit: AuditRecorder,
) -> AsyncIterator[QueueFactory]:
    """Builds more queues on the backend under test (other config keys, a second worker)."""
    factory = QueueFactory(bq_backend_config, conformance_clock, conformance_audit)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest.fixture
async def conformance_queue(conformance_queue_factory: QueueFactory) -> AsyncIterator[Queue]:
    """``Queue(backends={"conf": config}, clock=conformance_clock, sweep_interval=0)`` with
    ``config`` the factory's (``bq_backend_config``, a memory one given the test's namespace),
    started, recording audit events; shut down after the test."""
    async with conformance_queue_factory.open() as queue:
        yield queue


@pytest.fixture
def conformance(conformance_queue: Queue, conformance_queue_factory: QueueFactory) -> Conformance:
    """Everything a conformance test works with, in one object (the factory was built from
    ``bq_backend_config``, ``conformance_clock`` and ``conformance_audit``)."""
    return Conformance.of(conformance_queue, conformance_queue_factory)
