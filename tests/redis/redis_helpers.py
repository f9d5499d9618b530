"""Servers for the redis backend's tests: a single ``redis-server`` and a 3-node Redis Cluster,
each started on free loopback ports (the Debian package ``redis-server`` must be installed:
the tests fail, never skip, without it)."""

from __future__ import annotations

import base64
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster

from blamequeue.abc import NewJob
from blamequeue_testing.servers import REDIS_INSTALL_HINT, RedisServer, RedisServerError

SEAL: dict[str, Any] = {"keys": {"t1": base64.b64encode(secrets.token_bytes(32)).decode()}}
"""A seal key for the tests' queues (the redis backend requires one, or ``seal=False``)."""

T0 = 1_000.0
"""The time the backend tests' jobs are made at, unless they say otherwise."""


def new_job(
    job_id: str,
    queue: str = "q",
    *,
    priority: int = 0,
    available_at: float = T0,
    created_at: float = T0,
    payload: str = '"p"',
) -> NewJob:
    """A job to hand a backend's ``enqueue`` directly (below the queue's checks)."""
    return NewJob(
        id=job_id,
        queue=queue,
        payload=payload,
        priority=priority,
        max_attempts=5,
        created_at=created_at,
        available_at=available_at,
    )


def start_server(args: Sequence[str] = (), **kwargs: Any) -> RedisServer:
    """A started redis-server, or a test failure saying how to install it."""
    try:
        server = RedisServer(args=args, **kwargs)
        server.start()
    except RedisServerError as exc:
        pytest.fail(f"the redis tests need a local redis-server: {exc}")
    return server


def config(url: str, **extra: Any) -> dict[str, Any]:
    """A redis backend config with the tests' seal key."""
    return {"protocol": "redis", "url": url, "seal": SEAL, **extra}


class LocalCluster:
    """Three ``redis-server --cluster-enabled yes`` primaries, joined with
    ``redis-cli --cluster create`` (no replicas)."""

    def __init__(self) -> None:
        if shutil.which("redis-cli") is None:
            pytest.fail(f"the redis cluster tests need redis-cli: {REDIS_INSTALL_HINT}")
        self.directory = Path(tempfile.mkdtemp(prefix="blamequeue-cluster-"))
        self.nodes: list[RedisServer] = []
        self._clients: list[redis.Redis] = []
        try:
            for n in range(3):
                node_dir = self.directory / f"node{n}"
                node_dir.mkdir()
                self.nodes.append(
                    start_server(
                        [
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            "nodes.conf",
                            "--cluster-node-timeout",
                            "2000",
                        ],
                        directory=node_dir,
                    )
                )
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            created = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if created.returncode != 0:
                pytest.fail(f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}")
            self._wait_until_ok()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def _wait_until_ok(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                with redis.Redis(port=node.port) as client:
                    states.append(client.cluster("info").get("cluster_state"))
            if all(state == "ok" for state in states):
                return
            time.sleep(0.1)
        pytest.fail("the local redis cluster did not reach cluster_state:ok")

    def flush(self) -> None:
        if not self._clients:
            self._clients = [redis.Redis(port=node.port) for node in self.nodes]
        for client in self._clients:
            client.flushall()

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
