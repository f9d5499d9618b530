"""Audit events: what happened to jobs that an operator may have to account for.

Sinks receive :class:`AuditEvent` values (never a payload).  A sink that fails is logged and
skipped: auditing must never stop the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ._clock import to_datetime
from .abc import Clock
from .errors import ConfigError

if TYPE_CHECKING:
    from ._plugins import PluginRegistry

__all__ = ["AuditEvent", "AuditSink", "Auditor", "LoggingAuditSink", "registered_sinks"]

log = logging.getLogger("blamequeue.audit")


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


class LoggingAuditSink:
    """Writes each event to the ``blamequeue.audit`` logger at INFO."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log

    async def emit(self, event: AuditEvent) -> None:
        self.logger.info("%s", event.name, extra={"audit": event.to_dict()})


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
