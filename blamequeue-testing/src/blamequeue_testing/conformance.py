# ruff: noqa: E402 - the suite is imported after registering it for assert rewriting
"""The backend conformance suite: every semantic of SPEC §3 as tests, for any backend.

A backend author validates a backend by writing, in a test module of their own::

    import pytest
    from blamequeue_testing.conformance import *

    @pytest.fixture
    def bq_backend_config():
        return {"protocol": "mystore", "url": "..."}

Every test runs on asyncio and on trio (the ``anyio_backend`` fixture exported here is
parametrised over both; never pin it), drives the backend through the public ``Queue`` API with a
:class:`~blamequeue_testing.VirtualClock`, and skips, saying why, what the backend's declared
capabilities exclude.  Each test uses a queue name of its own, so a store shared between tests
(one Redis server) is fine.  A few tests look at the store through a second ``Queue`` built from
the same config, standing in for another process; they skip, saying why, unless the two share
one store.  That is true of every durable backend, and of ``{"protocol": "memory"}``: a memory
config without a ``namespace`` gets one of the test's own, dropped when the test ends.

Fixtures exported: ``anyio_backend``, ``conformance_clock`` (the virtual clock),
``conformance_audit`` (an :class:`AuditRecorder` of every audit event), ``conformance_queue``
(``Queue(backends={"conf": bq_backend_config}, clock=conformance_clock, sweep_interval=0)``,
started, shut down after the test), ``conformance_queue_factory`` (more queues on the same
backend) and ``conformance`` (all of them plus the test's queue name and the capabilities).
"""

from __future__ import annotations

import pytest

# The tests live in a private package; let pytest rewrite their asserts for readable failures.
pytest.register_assert_rewrite("blamequeue_testing._conformance")

from ._conformance.arguments import TestBadInput, TestLifecycleErrors
from ._conformance.audit import TestAudit
from ._conformance.backends import TestBackendStatus
from ._conformance.backoff import TestBackoff
from ._conformance.batches import TestBatches, TestWithoutBatches
from ._conformance.cancellation import TestCancel, TestCancelRunning, TestWithoutCancel
from ._conformance.consume import TestConsume, TestConsumerConcurrency, TestRateLimit
from ._conformance.dead_letters import TestDeadLetterQueue, TestWithoutDeadLetterQueue
from ._conformance.events import TestEvents, TestPause
from ._conformance.fixtures import (
    AuditRecorder,
    Conformance,
    anyio_backend,
    conformance,
    conformance_audit,
    conformance_clock,
    conformance_queue,
    conformance_queue_factory,
)
from ._conformance.flows import (
    TestFlowAcrossQueues,
    TestFlowPolicies,
    TestFlows,
    TestFlowValidation,
    TestWithoutCrossQueueFlows,
    TestWithoutFlowPolicies,
    TestWithoutFlows,
)
from ._conformance.handlers import TestHandlers
from ._conformance.inspection import (
    TestGetJob,
    TestListJobs,
    TestQueueCounts,
    TestWithoutInspection,
    TestWorkers,
)
from ._conformance.job_edits import TestJobEdits, TestWithoutJobEdits
from ._conformance.job_ids import TestJobIdArguments, TestJobIds, TestWithoutJobIds
from ._conformance.job_logs import TestJobLogs, TestLastProgress, TestWithoutJobLogs
from ._conformance.leases import (
    TestExtendLease,
    TestHeartbeat,
    TestLeaseFence,
    TestSweep,
)
from ._conformance.lifecycle import TestEnqueue, TestLifecycle
from ._conformance.lifo import TestLifo, TestLifoArguments, TestWithoutLifo
from ._conformance.limits import (
    TestGlobalRateLimit,
    TestGroupConcurrency,
    TestLimitArguments,
    TestWithoutLimits,
)
from ._conformance.observability import TestHealth, TestMetrics, TestQueueStats
from ._conformance.on_time import TestOnTime, TestOnTimeAcrossProcesses
from ._conformance.ordering import TestDelay, TestOrdering
from ._conformance.queue_events import TestQueueEvents, TestWithoutQueueEvents
from ._conformance.records import TestRecords, TestWithoutRecords
from ._conformance.results import (
    TestFlowResults,
    TestProgressEvents,
    TestResults,
    TestWithoutResults,
)
from ._conformance.retention import TestRetention, TestRetentionOptions, TestWithoutRetentionLimits
from ._conformance.retry_later import TestBackoffFunctions, TestRateLimited, TestRetryLater
from ._conformance.schedules import TestSchedules, TestWithoutSchedules
from ._conformance.sealing_audit import TestAuditTrail, TestSealing, TestSealKeyFile
from ._conformance.shutdown import TestShutdown
from ._conformance.size_and_purge import TestPurge, TestSize
from ._conformance.tick import TestTick
from ._conformance.timeouts import TestTimeouts
from ._conformance.unique import TestUniqueArguments, TestUniqueJobs, TestWithoutUniqueJobs
from ._conformance.waiting import TestWaitAndLease, TestWakeup

__all__ = [
    "AuditRecorder",
    "Conformance",
    "TestAudit",
    "TestAuditTrail",
    "TestBackendStatus",
    "TestBackoff",
    "TestBackoffFunctions",
    "TestBatches",
    "TestBadInput",
    "TestCancel",
    "TestCancelRunning",
    "TestConsume",
    "TestConsumerConcurrency",
    "TestDeadLetterQueue",
    "TestDelay",
    "TestEnqueue",
    "TestEvents",
    "TestExtendLease",
    "TestFlowResults",
    "TestFlowValidation",
    "TestFlows",
    "TestGetJob",
    "TestGlobalRateLimit",
    "TestGroupConcurrency",
    "TestHandlers",
    "TestHealth",
    "TestHeartbeat",
    "TestJobEdits",
    "TestJobLogs",
    "TestJobIdArguments",
    "TestJobIds",
    "TestLeaseFence",
    "TestLifecycle",
    "TestLastProgress",
    "TestLifecycleErrors",
    "TestLifo",
    "TestLifoArguments",
    "TestLimitArguments",
    "TestListJobs",
    "TestMetrics",
    "TestOnTime",
    "TestOnTimeAcrossProcesses",
    "TestOrdering",
    "TestPause",
    "TestProgressEvents",
    "TestPurge",
    "TestQueueCounts",
    "TestQueueEvents",
    "TestQueueStats",
    "TestRateLimit",
    "TestRateLimited",
    "TestRecords",
    "TestRetryLater",
    "TestResults",
    "TestRetention",
    "TestRetentionOptions",
    "TestSchedules",
    "TestSealKeyFile",
    "TestSealing",
    "TestShutdown",
    "TestSize",
    "TestSweep",
    "TestTick",
    "TestUniqueArguments",
    "TestUniqueJobs",
    "TestTimeouts",
    "TestWaitAndLease",
    "TestWakeup",
    "TestWithoutBatches",
    "TestWithoutCancel",
    "TestWithoutDeadLetterQueue",
    "TestWithoutRetentionLimits",
    "TestWithoutFlows",
    "TestFlowAcrossQueues",
    "TestFlowPolicies",
    "TestWithoutCrossQueueFlows",
    "TestWithoutFlowPolicies",
    "TestWithoutInspection",
    "TestWithoutJobEdits",
    "TestWithoutJobLogs",
    "TestWithoutJobIds",
    "TestWithoutLifo",
    "TestWithoutLimits",
    "TestWithoutQueueEvents",
    "TestWithoutRecords",
    "TestWithoutUniqueJobs",
    "TestWithoutResults",
    "TestWithoutSchedules",
    "TestWorkers",
    "anyio_backend",
    "conformance",
    "conformance_audit",
    "conformance_clock",
    "conformance_queue",
    "conformance_queue_factory",
]
