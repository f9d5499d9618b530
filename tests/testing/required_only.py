"""A backend with the required part of the contract only: the memory store seen through
:class:`blamequeue.abc.Backend` and no facet, as a third-party author's first backend is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from blamequeue.abc import (
    Backend,
    BackendContext,
    Lease,
    NewJob,
    Settlement,
    SweepResult,
)
from blamequeue_testing import MemoryBackend


class RequiredOnlyBackend(Backend):
    """Protocol ``required-only``: every required method, no facet (no DLQ reads, flows,
    records, inspection, ...).  Options are the memory backend's (``namespace``)."""

    protocol = "required-only"
    ephemeral = True

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._store = MemoryBackend(options, context)

    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        await self._store.enqueue(jobs)

    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        return await self._store.lease(queue, limit=limit, now=now, lease_seconds=lease_seconds)

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        return await self._store.settle(settlements, now=now)

    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float
    ) -> Sequence[bool | None]:
        return await self._store.extend(leases, expires_at=expires_at)

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        return await self._store.sweep(
            now=now, retain_done=retain_done, expired_error=expired_error
        )

    async def size(self, queue: str) -> int:
        return await self._store.size(queue)

    async def purge(self, queue: str) -> int:
        return await self._store.purge(queue)
