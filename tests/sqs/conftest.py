"""Fixtures of the sqs backend tests: moto's server and fresh queues per test."""

from __future__ import annotations

import pytest

from sqs.moto_server import SqsQueues, make_queues, sqs_endpoint

__all__ = ["sqs_endpoint", "sqs_queues"]


@pytest.fixture
def sqs_queues(sqs_endpoint: str) -> SqsQueues:
    """A standard queue (RedrivePolicy: 5 receives) and a FIFO queue, each with its own DLQ."""
    return make_queues(sqs_endpoint)
