"""What the dashboard reads and does on a queue, as a protocol the :class:`Queue` satisfies, so
the dashboard need not import the queue (which imports nearly everything)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._batches import Batch
    from ._metrics import QueueMetrics
    from ._models import (
        BackendStatus,
        DeadLetter,
        FlowStatus,
        JobInfo,
        JobPage,
        QueueInfo,
        WorkerInfo,
    )
    from ._schedules import ScheduleStatus

__all__ = ["QueueAdmin"]


class QueueAdmin(Protocol):
    """The reads and the dead-letter actions of a queue (see :class:`Queue` for each)."""

    def list_backends(self) -> list[BackendStatus]: ...
    async def queues(self, *, backend: str | None = None) -> list[QueueInfo]: ...
    async def metrics(
        self, queue_name: str, *, window: float = 3600.0, backend: str | None = None
    ) -> QueueMetrics: ...
    async def workers(self, *, backend: str | None = None) -> list[WorkerInfo]: ...
    async def job_info(self, job_id: str, *, backend: str | None = None) -> JobInfo | None: ...
    async def list_jobs(
        self,
        queue_name: str,
        *,
        state: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        backend: str | None = None,
    ) -> JobPage: ...
    async def flow_status(self, flow_id: str, *, backend: str | None = None) -> FlowStatus: ...
    async def batches(self, *, limit: int = 100, backend: str | None = None) -> list[Batch]: ...
    async def schedules(self) -> list[ScheduleStatus]: ...
    async def dlq_list(
        self, queue_name: str, *, backend: str | None = None, limit: int | None = None
    ) -> list[DeadLetter]: ...
    async def dlq_retry(self, job_id: str, *, backend: str | None = None) -> bool: ...
    async def dlq_purge(self, queue_name: str, *, backend: str | None = None) -> int: ...
