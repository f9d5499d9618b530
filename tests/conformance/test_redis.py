"""The conformance suite against the ``redis`` backend, on a ``redis-server`` the tests start
(a free loopback port, no persistence), on asyncio and trio.  Payloads are sealed, as a user's
are by default."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from blamequeue_testing.conformance import *  # noqa: F403
from blamequeue_testing.servers import RedisServer, RedisServerError

SEAL = {"keys": {"conformance": base64.b64encode(secrets.token_bytes(32)).decode("ascii")}}


@pytest.fixture(scope="session")
def conformance_redis_url() -> Iterator[str]:
    try:
        server = RedisServer()
        server.start()
    except RedisServerError as exc:
        pytest.fail(f"the redis tests need a local redis-server: {exc}")
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture
def bq_backend_config(conformance_redis_url: str) -> dict[str, Any]:
    # Every test uses queue names of its own; flushing keeps the registry of queue names (which
    # the sweep walks) small.
    with redis.Redis.from_url(conformance_redis_url) as client:
        client.flushall()
    return {"protocol": "redis", "url": conformance_redis_url, "seal": SEAL}
