"""Fixtures of the tracing tests: the OpenTelemetry SDK recording spans and metrics in memory,
and the backends a job's trace context must survive."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tracing_helpers import Recording, recording

from blamequeue_testing.servers import RedisServer
from sqs.moto_server import sqs_endpoint

__all__ = ["sqs_endpoint"]


@pytest.fixture
def otel() -> Iterator[Recording]:
    """Spans and metrics recorded by the SDK for this test (none before, none after)."""
    with recording() as recorded:
        yield recorded


@pytest.fixture(scope="session")
def tracing_redis_url() -> Iterator[str]:
    with RedisServer() as server:  # fails, never skips, without a redis-server
        yield server.url
