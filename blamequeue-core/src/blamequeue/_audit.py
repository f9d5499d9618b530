"""Audit events: what happened to jobs that an operator may have to account for.

Sinks receive :class:`AuditEvent` values: never a payload, progress data, context value or
error text in plaintext (emitters pass :func:`data_shape` and :func:`error_type` instead).  A
sink that fails is logged and skipped: auditing must never stop the queue.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ._clock import to_datetime
from .abc import Clock, StoredJob
from .errors import ConfigError

if TYPE_CHECKING:
    from ._models import Job
    from ._plugins import PluginRegistry
    from ._sealing import SealPlan

__all__ = [
    "AuditEvent",
    "AuditSink",
    "Auditor",
    "LoggingAuditSink",
    "data_shape",
    "error_type",
    "registered_sinks",
]

log = logging.getLogger("blamequeue.audit")

_ERROR_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}\Z")


def data_shape(data: Any) -> dict[str, Any]:
    """What the audit trail may say of caller data (progress data): its size, never its
    values."""
    if data is None:
        return {}
    shape: dict[str, Any] = {
        "data_bytes": len(json.dumps(data, default=str, ensure_ascii=False).encode("utf-8"))
    }
    if isinstance(data, Mapping):
        shape["data_keys"] = len(data)
    return shape


def error_type(error: str | None) -> str:
    """The exception type (or error code) an error text starts with; ``"unknown"`` when it
    does not start with one (the text itself may quote payload data, so it is never kept)."""
    head = (error or "").split(":", 1)[0].strip()
    return head if _ERROR_TYPE.match(head) else "unknown"


@attrs.frozen(kw_only=True)
class AuditEvent:
    name: str
    time: datetime
    backend: str
    queue: str | None = None
    job_id: str | None = None
    trace_id: str | None = None
    classification: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "time": self.time.isoformat(),
            "backend": self.backend,
            "queue": self.queue,
            "job_id": self.job_id,
            "trace_id": self.trace_id,
            "classification": self.classification,
            "data": dict(self.data),
        }


class AuditSink(Protocol):
    async def emit(self, event: AuditEvent) -> None: ...


@runtime_checkable
class ChainedSink(Protocol):
    """A sink keeping a keyed chain (``JsonlAuditSink``): the queue hands it the seal keys and
    prepares it at start; logging sinks anchor its head.  Told apart by what it can do, so this
    module need not import the file sink's."""

    head: Any
    """The chain's head after the sink's last write (``None`` before its first)."""

    def use_seal_keys(self, keys: Mapping[str, bytes] | None) -> None: ...

    async def prepare(self) -> None: ...


class LoggingAuditSink:
    """Writes each event to the ``blamequeue.audit`` logger at INFO.

    It also anchors audit files: every ``head_every`` events it logs, and when its queue stops,
    it logs the head of each file sink in ``heads_of`` (by default every ``JsonlAuditSink`` of
    its queue) as ``audit chain head FILE: N lines, last mac H``, with
    ``{"file", "count", "hash"}`` in the record's ``audit_head`` attribute.  Logs shipped
    elsewhere then hold heads that ``blamequeue audit verify --expect-count N --expect-head H``
    checks, so lines cut off the file's end do not go unnoticed.
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        heads_of: Iterable[Any] | None = None,
        head_every: int = 100,
    ) -> None:
        if isinstance(head_every, bool) or not isinstance(head_every, int) or head_every < 1:
            raise ConfigError(
                "queue/invalid-config",
                f"LoggingAuditSink(head_every=...) must be a whole number of events >= 1, got "
                f"{head_every!r}",
            )
        self.logger = logger or log
        self.heads_of: list[Any] | None = None if heads_of is None else list(heads_of)
        self.head_every = head_every
        self._since_head = 0

    async def emit(self, event: AuditEvent) -> None:
        self.logger.info("%s", event.name, extra={"audit": event.to_dict()})
        self._since_head += 1
        if self._since_head >= self.head_every:
            self.log_heads()

    def log_heads(self) -> None:
        """Log the head of each anchored file sink that has written."""
        self._since_head = 0
        for sink in self.heads_of or ():
            head = getattr(sink, "head", None)
            if head is None:
                continue
            self.logger.info(
                "audit chain head %s: %d lines, last mac %s",
                sink.path,
                head.count,
                head.hash,
                extra={"audit_head": {"file": sink.path, "count": head.count, "hash": head.hash}},
            )

    async def close(self) -> None:
        self.log_heads()


def _durable_keys(seal: SealPlan | None) -> Mapping[str, bytes] | None:
    """The keyring a backend seals with, when it outlives this process (not ``memory``'s
    process key, which nobody could verify with later)."""
    if seal is None or seal.source in ("off", "process"):
        return None
    return seal.keys or None


def registered_sinks(registry: PluginRegistry) -> list[AuditSink]:
    """The sinks plugins registered through ``blamequeue_register_audit_sinks``, checked."""
    sinks: list[AuditSink] = []
    for name, registration in registry.audit_sinks.items():
        sink = registration.value
        if isinstance(sink, type) or not callable(getattr(sink, "emit", None)):
            raise ConfigError(
                "queue/invalid-config",
                f"plugin {registration.plugin!r} registered audit sink {name!r} as {sink!r}, "
                f"which is not an object with an async emit(event) method (register an "
                f"instance, not a class); fix or disable the plugin with "
                f"BLAMEQUEUE_DISABLE_PLUGINS",
            )
        sinks.append(sink)
    return sinks


@attrs.define(eq=False)
class Auditor:
    clock: Clock
    sinks: list[AuditSink] = attrs.field(factory=list)

    def add(self, sinks: Iterable[AuditSink]) -> None:
        self.sinks.extend(sinks)

    async def prepare(self, seal: SealPlan | None) -> None:
        """Run when the queue starts, ``seal`` being how its default backend seals: hand the
        file sinks its keys (when they outlive this process) and let them pick their key and
        check their path (one that cannot work raises ``queue/invalid-config``, failing the
        start); anchor the logging sinks to the file sinks.  Other sinks are left alone."""
        seal_keys = _durable_keys(seal)
        files = [sink for sink in self.sinks if isinstance(sink, ChainedSink)]
        for file_sink in files:
            file_sink.use_seal_keys(seal_keys)
            await file_sink.prepare()
        for sink in self.sinks:
            if isinstance(sink, LoggingAuditSink) and sink.heads_of is None:
                sink.heads_of = list(files)

    async def close(self) -> None:
        """Run when the queue stops: the logging sinks log the heads of their file sinks."""
        for sink in self.sinks:
            if isinstance(sink, LoggingAuditSink):
                await sink.close()

    async def emit(
        self,
        name: str,
        *,
        backend: str,
        queue: str | None = None,
        job_id: str | None = None,
        trace_id: str | None = None,
        classification: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        if not self.sinks:
            return
        event = AuditEvent(
            name=name,
            time=to_datetime(self.clock.now()),
            backend=backend,
            queue=queue,
            job_id=job_id,
            trace_id=trace_id,
            classification=classification,
            data=dict(data or {}),
        )
        for sink in self.sinks:
            try:
                await sink.emit(event)
            except Exception:
                log.exception("audit sink %r failed on %s; event skipped", sink, name)

    async def emit_job(
        self,
        name: str,
        job: StoredJob | Job,
        *,
        backend: str,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """:meth:`emit` an event about ``job``: its queue, id, trace id and classification."""
        await self.emit(
            name,
            backend=backend,
            queue=job.queue,
            job_id=job.id,
            trace_id=job.trace_id,
            classification=job.classification,
            data=data,
        )
