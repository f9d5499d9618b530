"""Fixtures of the redis backend's tests: one ``redis-server`` for the session (flushed before
each test that asks for ``redis_url``), and a local 3-node cluster for the tests that need one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis_helpers import LocalCluster, start_server

from blamequeue_testing.servers import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, emptied for this test."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A sync client of the session server, to look at what the backend stored."""
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        yield client


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster()
    try:
        yield cluster
    finally:
        cluster.stop()
