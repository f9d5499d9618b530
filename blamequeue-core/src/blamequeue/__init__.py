"""blamequeue: a durable, pluggable job queue for asyncio and trio.

>>> from blamequeue import Queue
>>> queue = Queue(backends={"primary": {"protocol": "local"}})
"""

from __future__ import annotations

from ._audit import AuditEvent, LoggingAuditSink
from ._audit_file import JsonlAuditSink
from ._backoff import Backoff, ExponentialBackoff, FixedBackoff, LinearBackoff, ScheduleBackoff
from ._batches import Batch, PendingBatch
from ._consumer import Consumer, ConsumerStats
from ._context import JobContext
from ._cron import Cron
from ._dashboard import dashboard_app
from ._events import EVENT_NAMES, EventSubscription, QueueEvent, listens_to
from ._health import HealthAlert, HealthReport, HealthThresholds, QueueHealth, health_app
from ._metrics import MinuteMetrics, QueueMetrics, RecentError
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
    JobLogLine,
    JobPage,
    JobProgress,
    QueueInfo,
    RateLimit,
    TickResult,
    WorkerInfo,
)
from ._notifications import (
    DeadJob,
    DeadJobNotifier,
    DiscordChannel,
    EmailChannel,
    LogChannel,
    SlackChannel,
    WebhookChannel,
    verify_signature,
)
from ._outcomes import RateLimited, RetryLater, UnrecoverableError
from ._progress import JobEvent, Subscription
from ._prometheus import metrics_app
from ._queue import Queue
from ._queue_watch import QueueWatch
from ._schedules import Every, Schedule, ScheduleStatus
from ._tasks import FunctionTask, PendingDispatch, Task, TaskRegistry, task
from .errors import QueueError
from .hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "EVENT_NAMES",
    "AuditEvent",
    "BackendStatus",
    "Backoff",
    "Batch",
    "Consumer",
    "ConsumerStats",
    "Cron",
    "DeadJob",
    "DeadJobNotifier",
    "DeadLetter",
    "DiscordChannel",
    "EmailChannel",
    "EventSubscription",
    "Every",
    "ExponentialBackoff",
    "FixedBackoff",
    "FlowChild",
    "FlowChildStatus",
    "FlowJob",
    "FlowResult",
    "FlowStatus",
    "FunctionTask",
    "HealthAlert",
    "HealthReport",
    "HealthThresholds",
    "Job",
    "JobContext",
    "JobEvent",
    "JobInfo",
    "JobLogLine",
    "JobPage",
    "JobProgress",
    "JsonlAuditSink",
    "LinearBackoff",
    "LogChannel",
    "LoggingAuditSink",
    "MinuteMetrics",
    "PendingBatch",
    "PendingDispatch",
    "Queue",
    "QueueError",
    "QueueEvent",
    "QueueWatch",
    "QueueHealth",
    "QueueInfo",
    "QueueMetrics",
    "RateLimit",
    "RecentError",
    "Schedule",
    "ScheduleBackoff",
    "ScheduleStatus",
    "SlackChannel",
    "Subscription",
    "Task",
    "TaskRegistry",
    "TickResult",
    "UnrecoverableError",
    "RateLimited",
    "RetryLater",
    "WebhookChannel",
    "WorkerInfo",
    "__version__",
    "dashboard_app",
    "health_app",
    "hookimpl",
    "listens_to",
    "metrics_app",
    "task",
    "verify_signature",
]
