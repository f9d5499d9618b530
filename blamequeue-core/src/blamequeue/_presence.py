"""Worker presence: every consumer registers itself in its backend's worker registry when it
starts, refreshes its record every :data:`HEARTBEAT_INTERVAL` seconds and deregisters when it
stops, so any process (the CLI, a dashboard) can list the live workers (``Queue.workers``).

A worker that dies without deregistering simply stops refreshing: a record older than
:data:`LIVE_FOR` is not live.  Presence is advisory: a failed heartbeat is logged at debug level
and never disturbs the consumer, and a backend without a registry is not asked again.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from typing import TYPE_CHECKING, Protocol

import anyio

from ._ids import new_id
from .abc import Inspection, WorkerRecord
from .errors import QueueError, UnsupportedError

if TYPE_CHECKING:
    from ._execution import SettleCounts
    from ._runtime import BackendRuntime

__all__ = ["HEARTBEAT_INTERVAL", "LIVE_FOR", "Presence", "Worker"]

log = logging.getLogger("blamequeue")

HEARTBEAT_INTERVAL = 5.0
"""Seconds (of the queue's clock) between two heartbeats of one consumer."""

LIVE_FOR = 3 * HEARTBEAT_INTERVAL
"""A worker whose last heartbeat is older than this is not live: two heartbeats may be late."""

_LEAVE_TIMEOUT = 5.0


class Worker(Protocol):
    """What a worker's record tells of the consumer it stands for (a :class:`Consumer`)."""

    @property
    def queue_name(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def stats(self) -> SettleCounts: ...


class Presence:
    """One consumer's record in the worker registry."""

    def __init__(self, runtime: BackendRuntime, consumer: Worker) -> None:
        self.id = "worker-" + new_id()
        self._runtime = runtime
        self._consumer = consumer
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._started_at = runtime.clock.now()
        self._supported = isinstance(runtime.backend, Inspection)
        self._registered = False
        self._last_beat = self._started_at

    def record(self) -> WorkerRecord:
        consumer = self._consumer
        stats = consumer.stats
        return WorkerRecord(
            id=self.id,
            queue=consumer.queue_name,
            host=self._host,
            pid=self._pid,
            concurrency=consumer.concurrency,
            started_at=self._started_at,
            heartbeat_at=self._runtime.clock.now(),
            in_flight=consumer.in_flight,
            succeeded=stats.succeeded,
            failed=stats.failed,
        )

    async def beat(self) -> None:
        """Write the record now (the first call registers the worker)."""
        if not self._supported:
            return
        self._last_beat = self._runtime.clock.now()
        try:
            backend = Inspection.of(self._runtime.backend)
            await self._runtime.call(
                "worker_heartbeat", functools.partial(backend.worker_heartbeat, self.record())
            )
        except UnsupportedError as exc:
            self._supported = False
            log.debug("backend %r keeps no worker registry: %s", self._runtime.name, exc)
            return
        except QueueError as exc:
            log.debug("heartbeat of worker %s on %r failed: %s", self.id, self._runtime.name, exc)
            return
        self._registered = True

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        clock = self._runtime.clock
        while self._supported:
            # Due an interval after the last beat, not after this loop started: a clock that
            # jumped ahead meanwhile (a virtual one) gets its heartbeat at once.
            await clock.sleep(self._last_beat + HEARTBEAT_INTERVAL - clock.now())
            await self.beat()

    async def leave(self) -> None:
        """Deregister (shielded, bounded): the worker is stopping."""
        if not self._registered:
            return
        self._registered = False
        with anyio.move_on_after(_LEAVE_TIMEOUT, shield=True):
            try:
                backend = Inspection.of(self._runtime.backend)
                await self._runtime.call(
                    "worker_gone", functools.partial(backend.worker_gone, self.id)
                )
            except QueueError as exc:
                log.debug("worker %s could not deregister: %s", self.id, exc)
