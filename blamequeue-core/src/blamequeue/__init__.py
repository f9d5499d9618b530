"""blamequeue: a durable, pluggable job queue for asyncio and trio.

>>> from blamequeue import Queue
>>> queue = Queue(backends={"primary": {"protocol": "local"}})
"""

from __future__ import annotations

from ._audit import AuditEvent, LoggingAuditSink
from ._audit_file import JsonlAuditSink
from ._backoff import Backoff, ExponentialBackoff, FixedBackoff, LinearBackoff, ScheduleBackoff
from ._consumer import Consumer, ConsumerStats
from ._context import JobContext
from ._models import (
    BackendStatus,
    DeadLetter,
    FlowChild,
    FlowChildStatus,
    FlowJob,
    FlowResult,
    FlowStatus,
    Job,
    JobInfo,
    JobPage,
    QueueInfo,
    RateLimit,
    TickResult,
    WorkerInfo,
)
from ._progress import JobEvent, Subscription
from ._queue import Queue
from ._tasks import FunctionTask, PendingDispatch, Task, TaskRegistry, task
from .errors import QueueError
from .hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "AuditEvent",
    "BackendStatus",
    "Backoff",
    "Consumer",
    "ConsumerStats",
    "DeadLetter",
    "ExponentialBackoff",
    "FixedBackoff",
    "FlowChild",
    "FlowChildStatus",
    "FlowJob",
    "FlowResult",
    "FlowStatus",
    "FunctionTask",
    "Job",
    "JobContext",
    "JobEvent",
    "JobInfo",
    "JobPage",
    "JsonlAuditSink",
    "LinearBackoff",
    "LoggingAuditSink",
    "PendingDispatch",
    "Queue",
    "QueueError",
    "QueueInfo",
    "RateLimit",
    "ScheduleBackoff",
    "Task",
    "TaskRegistry",
    "Subscription",
    "TickResult",
    "WorkerInfo",
    "__version__",
    "hookimpl",
    "task",
]
