"""Fixtures of the tracing tests: the OpenTelemetry SDK recording spans and metrics in memory,
and the backends a job's trace context must survive."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tracing_helpers import Recording, recording

from blamequeue_testing.servers import RedisServer, RedisServerError
from sqs.moto_server import sqs_endpoint

__all__ = ["sqs_endpoint"]


@pytest.fixture
def otel() -> Iterator[Recording]:
    """Spans and metrics recorded by the SDK for this test (none before, none after)."""
    with recording() as recorded:
        yield recorded


@pytest.fixture(scope="session")
def tracing_redis_url() -> Iterator[str]:
    try:
        server = RedisServer()
        server.start()
    except RedisServerError as exc:
        pytest.fail(f"the redis tests need a local redis-server: {exc}")
    try:
        yield server.url
    finally:
        server.cleanup()
