"""One configured backend as the queue drives it: the plugin's store plus the policies the core
applies around it (retry + breaker, backoff, attempts, retention, codec, same-process wake-ups)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import anyio
import attrs

from ._audit import Auditor
from ._backoff import Backoff, parse_backoff
from ._codec import Codec
from ._deferred import is_deferred
from ._events import EventBus
from ._job_logging import job_extra
from ._job_meta import JobMeta
from ._metrics_buffer import MetricsBuffer
from ._plugins import PluginRegistry
from ._queue_watch import EventPublisher
from ._resilience import CircuitBreaker, Guard, parse_breaker_options, parse_retry
from ._sealing import SealPlan, plan_seal
from ._suggest import did_you_mean_protocol
from ._validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_SECONDS_TEXT,
    check_max_payload_bytes,
    is_duration,
)
from .abc import (
    Backend,
    BackendContext,
    Clock,
    QueueEvents,
    Retention,
    RetentionLimits,
    StoredJob,
)
from .errors import ConfigError, ErrorCode, QueueError, SealKeyMissingError, UnsupportedError

__all__ = ["BackendRuntime", "build_runtime"]

T = TypeVar("T")
log = logging.getLogger("blamequeue")

#: Keys every backend config may carry; the queue takes them, the backend sees the rest.
COMMON_KEYS = frozenset(
    {
        "protocol",
        "retry",
        "breaker",
        "backoff",
        "max_attempts",
        "retain_done",
        "retain_dead",
        "retain_done_count",
        "retain_dead_count",
        "seal",
        "max_payload_bytes",
    }
)
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RETAIN_DONE = 3600.0
#: The most ``retain_done_count`` / ``retain_dead_count`` may be (exact as a float and in Lua).
MAX_RETAIN_COUNT = 2**53
SYNC_HANDLER_THREADS = 64


@attrs.define(eq=False)
class BackendRuntime:
    name: str
    protocol: str
    backend: Backend
    guard: Guard
    backoff: Backoff
    max_attempts: int
    retain_done: float
    codec: Codec
    auditor: Auditor
    clock: Clock
    seal: SealPlan | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    retention: Retention = attrs.field(factory=Retention)
    """The limits beyond ``retain_done`` (``retain_dead``, ``retain_*_count``, SPEC §3.12),
    applied after each sweep by a backend with :class:`~blamequeue.abc.RetentionLimits`."""
    """The most bytes a payload's JSON (before sealing) may take: the ``max_payload_bytes``
    option, checked where payloads are encoded (``dumps(payload, max_payload_bytes)``)."""
    _wake: dict[str, anyio.Event] = attrs.field(factory=dict, init=False)
    _wake_scopes: dict[str, set[anyio.CancelScope]] = attrs.field(factory=dict, init=False)
    metrics: MetricsBuffer = attrs.field(factory=MetricsBuffer, init=False)
    events: EventBus = attrs.field(factory=EventBus, init=False)
    """The listeners of the queue this runtime belongs to (the queue sets its own bus)."""
    publisher: EventPublisher | None = attrs.field(default=None, init=False)
    """Where this process's events of the backend go to reach every ``Queue.watch``, in any
    process (``None``: the backend has no ``queue_events``)."""
    paused: dict[str, tuple[bool, float]] = attrs.field(factory=dict, init=False)
    rate_limited: dict[str, tuple[float | None, float]] = attrs.field(factory=dict, init=False)
    """Per queue name: when its rate-limit pause ends (``None``: none known), and when that
    was last read from the store (_rate_limited.py)."""
    rate_limited_local_only: set[str] = attrs.field(factory=set, init=False)
    """Queues whose rate-limit pause this backend could not share (logged once each)."""
    batches_cancelled: dict[str, tuple[bool, float]] = attrs.field(factory=dict, init=False)
    """Per batch id: whether it was cancelled when last read, and when (_batches.py)."""
    """Per queue name: whether it was paused when last read, and when (_pause.py)."""
    """This process's tallies of settled attempts, until the next flush (_metrics.py)."""
    _sync_limiter: anyio.CapacityLimiter | None = attrs.field(default=None, init=False)
    missing_seal_key: str | None = attrs.field(default=None, init=False)
    """The id of a seal key a job needed and this process lacks: once set, its consumers and
    ticks lease nothing more from this backend (SPEC §6), until a restart with the key."""

    @property
    def keeps_done(self) -> bool:
        """Whether a completed job is kept at all (``Settlement.keep``): not with
        ``retain_done=0`` or ``retain_done_count=0``."""
        return self.retain_done > 0 and self.retention.done_count != 0

    def seal_key_missing(self, error: SealKeyMissingError, stored: StoredJob) -> None:
        """A leased job was sealed with a key this process lacks: say so loudly (log,
        ``queue.error`` event, health) and stop leasing here."""
        queue, first = stored.queue, self.missing_seal_key is None
        self.missing_seal_key = error.key_id or "?"
        if first:
            log.error(
                "backend %r: a job on %r is sealed with key id %r, which this process does not "
                "hold; it was released untouched and this process leases nothing more from "
                "the backend. Add the key to the seal configuration and restart.",
                self.name,
                queue,
                self.missing_seal_key,
                extra=job_extra(self.name, stored),
            )
        self.events.emit(
            "queue.error",
            queue=queue,
            backend=self.name,
            at=self.clock.now(),
            data={"operation": "unseal", "code": error.code, "key_id": self.missing_seal_key},
        )

    def leased(self, queue: str, count: int) -> None:
        """A lease of ``queue`` took ``count`` jobs: maybe the last due ones, which raises
        ``queue.drained`` for its watchers (see :meth:`EventPublisher.leased`)."""
        if count and self.publisher is not None:
            self.publisher.leased(queue, at=self.clock.now())

    def refuse_if_key_missing(self) -> None:
        """Raise :class:`SealKeyMissingError` once a job met a key this process lacks."""
        if self.missing_seal_key is not None:
            raise SealKeyMissingError(
                f"backend {self.name!r}: jobs are sealed with key id "
                f"{self.missing_seal_key!r}, which this process does not hold; it leases "
                f"nothing more until restarted with that key in its seal configuration",
                key_id=self.missing_seal_key,
            )

    def sync_handler_limiter(self) -> anyio.CapacityLimiter:
        """Bounds the threads plain ``def`` handlers run in, so a burst cannot exhaust the
        default pool.  Made on first use: a limiter belongs to the event loop that made it."""
        if self._sync_limiter is None:
            self._sync_limiter = anyio.CapacityLimiter(SYNC_HANDLER_THREADS)
        return self._sync_limiter

    async def prepare_seal(self) -> None:
        """Load the seal key (creating the key file beside the database if need be): at start,
        right after the backend opened (its own error names a missing directory best)."""
        if self.seal is not None:
            self.codec = await self.seal.prepare()

    async def call(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T:
        return await self.guard.call(operation, fn)

    def wake_event(self, queue: str) -> anyio.Event:
        """The event the next same-process enqueue on ``queue`` sets."""
        event = self._wake.get(queue)
        if event is None:
            event = self._wake[queue] = anyio.Event()
        return event

    def notify(self, queue: str) -> None:
        event = self._wake.pop(queue, None)
        if event is not None:
            event.set()
        for scope in self._wake_scopes.pop(queue, ()):
            scope.cancel()

    def notify_flow(self, job: StoredJob, meta: JobMeta | None = None) -> None:
        """The flow job ``job`` ended (done, dead or cancelled), which may have released
        children of its flow: wake this process's idle consumers of its queue and of every
        other queue of its flow (``meta``: its parsed meta, when the caller has it)."""
        self.notify(job.queue)
        for queue in (meta or JobMeta.parse(job.meta)).flow_queues:
            if queue != job.queue:
                self.notify(queue)

    @contextlib.contextmanager
    def cancelled_on_wake(self, queue: str, scope: anyio.CancelScope) -> Iterator[None]:
        """While inside, the next same-process :meth:`notify` of ``queue`` cancels ``scope``
        (an idle wait that needs no task to watch the wake event)."""
        scopes = self._wake_scopes.setdefault(queue, set())
        scopes.add(scope)
        try:
            yield
        finally:
            scopes.discard(scope)
            if not scopes and self._wake_scopes.get(queue) is scopes:
                del self._wake_scopes[queue]

    def unsupported(self, code: ErrorCode, why: str) -> UnsupportedError:
        """The error ``code`` for a feature this backend lacks; ``why`` follows its name
        (``"cannot ...; use ..."``)."""
        return UnsupportedError(code, f"backend {self.name!r} (protocol {self.protocol!r}) {why}")

    async def breaker_changed(self, state: str) -> None:
        await self.auditor.emit(
            f"system.queue.breaker.{'open' if state == 'open' else 'close'}",
            backend=self.name,
            data={"protocol": self.protocol},
        )


def _config_error(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


def build_runtime(
    name: str,
    config: Any,
    *,
    registry: PluginRegistry,
    clock: Clock,
    auditor: Auditor,
    seal: Any = None,
    env: Mapping[str, str] | None = None,
) -> BackendRuntime:
    """``seal`` is the ``Queue(seal=...)`` setting and ``env`` the environment holding
    ``BLAMEQUEUE_SEAL_KEYS``; the backend config's own ``"seal"`` comes first (SPEC §6)."""
    where = f"backends[{name!r}]"
    if not isinstance(config, Mapping):
        raise _config_error(
            f'{where} must be a mapping like {{"protocol": "local"}}, got {type(config).__name__}'
        )
    protocol = config.get("protocol")
    if not isinstance(protocol, str) or not protocol:
        raise _config_error(f'{where} needs a "protocol" (e.g. "local", "redis", "sqs")')
    registration = registry.protocols.get(protocol)
    if registration is None:
        raise _config_error(_unknown_protocol_message(where, protocol, registry))

    max_attempts = config.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise _config_error(f"{where}.max_attempts must be an integer >= 1, got {max_attempts!r}")
    retain = config.get("retain_done", DEFAULT_RETAIN_DONE)
    if not is_duration(retain):
        raise _config_error(
            f"{where}.retain_done must be seconds >= 0 (0 deletes done jobs at once) and at "
            f"most {MAX_SECONDS_TEXT}, got {retain!r}"
        )
    retention = _parse_retention(config, where)
    try:
        backoff = parse_backoff(config.get("backoff"), where=f"{where}.backoff")
    except QueueError as exc:
        raise _config_error(exc.message) from exc
    retry = parse_retry(config.get("retry"), f"{where}.retry")
    breaker = CircuitBreaker(
        **parse_breaker_options(config.get("breaker"), f"{where}.breaker"), clock=clock
    )

    options = {k: v for k, v in config.items() if k not in COMMON_KEYS}
    backend_cls = registration.value
    # A backend whose messages carry at most so much (SQS) says so; it is then the default.
    ceiling = getattr(backend_cls, "max_payload_bytes", None)
    max_payload = check_max_payload_bytes(
        config.get("max_payload_bytes", ceiling or DEFAULT_MAX_PAYLOAD_BYTES),
        f"{where}.max_payload_bytes",
        ceiling=ceiling,
    )
    backend = backend_cls(options, BackendContext(name=name, clock=clock))
    if retention.limited:
        RetentionLimits.of(backend)  # queue/retention-unsupported: nothing is opened yet
    seal_plan = plan_seal(
        name=name,
        protocol=protocol,
        backend_seal=config.get("seal"),
        queue_seal=seal,
        env={} if env is None else env,
        backend=backend,
        sealers=registry.sealers,
    )
    runtime = BackendRuntime(
        name=name,
        protocol=protocol,
        backend=backend,
        guard=Guard(backend_name=name, retry=retry, breaker=breaker),
        backoff=backoff,
        max_attempts=max_attempts,
        retain_done=float(retain),
        retention=retention,
        codec=seal_plan.codec,
        auditor=auditor,
        clock=clock,
        seal=seal_plan,
        max_payload_bytes=max_payload,
    )
    breaker.on_change = runtime.breaker_changed
    if isinstance(backend, QueueEvents):
        runtime.publisher = EventPublisher(backend=backend, clock=clock, name=name)
    return runtime


def _parse_retention(config: Mapping[str, Any], where: str) -> Retention:
    """The options ``retain_dead``, ``retain_done_count`` and ``retain_dead_count``; a bad
    value is ``queue/invalid-config`` naming the option."""
    dead = config.get("retain_dead")
    if dead is not None and not is_duration(dead):
        raise _config_error(
            f"{where}.retain_dead must be seconds >= 0 (0: the next sweep deletes every dead "
            f"job) and at most {MAX_SECONDS_TEXT}, or None to keep dead jobs until they are "
            f"retried or purged, got {dead!r}"
        )
    counts: dict[str, int | None] = {}
    for option, what in (("retain_done_count", "done"), ("retain_dead_count", "dead")):
        count = config.get(option)
        if count is not None and (
            isinstance(count, bool)
            or not isinstance(count, int)
            or not 0 <= count <= MAX_RETAIN_COUNT
        ):
            raise _config_error(
                f"{where}.{option} must be a whole number of {what} jobs to keep per queue, "
                f"from 0 (keep none) to {MAX_RETAIN_COUNT}, or None for no limit, got {count!r}"
            )
        counts[option] = count
    return Retention(
        dead=None if dead is None else float(dead),
        done_count=counts["retain_done_count"],
        dead_count=counts["retain_dead_count"],
    )


_EXTRAS = {"redis": "redis", "sqs": "sqs", "memory": "testing"}


def _guess(protocol: str, known: Iterable[str]) -> str:
    guess = did_you_mean_protocol(protocol, known)
    return f" ({guess})" if guess else ""


def _unknown_protocol_message(where: str, protocol: str, registry: PluginRegistry) -> str:
    deferred = sorted(name for name, r in registry.protocols.items() if is_deferred(r.value))
    known = ", ".join(sorted(set(registry.protocols) - set(deferred))) or "none"
    if deferred:
        known += f"; named but not implemented yet (deferred): {', '.join(deferred)}"
    broken = "".join(
        f" Plugin {name!r} is installed but failed to import ({error}); reinstall it."
        for name, error in sorted(registry.failed.items())
    )
    extra = _EXTRAS.get(protocol)
    if extra is not None:
        return (
            f"{where}: protocol {protocol!r} is not installed; install it with "
            f"`pip install blamequeue[{extra}]` (installed protocols: {known}).{broken}"
        )
    return (
        f"{where}: unknown protocol {protocol!r}{_guess(protocol, registry.protocols)}; "
        f"installed protocols: {known}. A third-party backend registers its protocol through "
        f"the 'blamequeue' entry-point group.{broken}"
    )
