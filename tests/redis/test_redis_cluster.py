"""The whole conformance suite against a local 3-node Redis Cluster, through redis-py's cluster
clients (``redis.asyncio.cluster.RedisCluster`` on asyncio, ``redis.cluster.RedisCluster`` in
worker threads on trio): every key of a queue carries the queue name as a hash tag, so every
script runs on the one node owning that slot."""

from __future__ import annotations

from typing import Any

import pytest
from redis_helpers import LocalCluster, config

from blamequeue_testing.conformance import *  # noqa: F403


@pytest.fixture
def bq_backend_config(redis_cluster: LocalCluster) -> dict[str, Any]:
    redis_cluster.flush()
    return config(redis_cluster.url, cluster=True)
