"""The conformance suite against the ``sqs`` backend, on moto's SQS server.

Every queue name of a test gets an SQS queue of its own (a templated ``queue_url`` and
``create_queues``), so names are isolated as on every backend.  The tests this backend skips,
and why, come from its capabilities: no priorities, and leases kept by SQS itself
(``store_clock``), which the suite's virtual clock cannot expire.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from blamequeue_testing.conformance import *  # noqa: F403
from sqs.moto_server import REGION, SEAL, sqs_endpoint  # noqa: F401 - the fixture


@pytest.fixture
def bq_backend_config(sqs_endpoint: str) -> dict[str, Any]:  # noqa: F811
    prefix = f"c{uuid.uuid4().hex[:10]}"
    return {
        "protocol": "sqs",
        "queue_url": f"{sqs_endpoint}/123456789012/{prefix}-{{queue}}",
        "endpoint_url": sqs_endpoint,
        "region": REGION,
        "create_queues": True,
        "dlq_scan_wait": 0,
        "seal": SEAL,
    }
