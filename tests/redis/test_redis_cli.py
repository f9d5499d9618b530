"""``blamequeue bench --backend redis``: on a temporary server it starts itself, or on a server
given with ``--url`` (whose keys it deletes afterwards).  Speeds are never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import redis

from blamequeue_testing.servers import RedisServer

DEADLINE = 120.0


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAMEQUEUE_")}
    command = [sys.executable, "-m", "blamequeue._cli", "bench", "--backend", "redis", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=DEADLINE, check=False
    )


def test_bench_on_a_temporary_server() -> None:
    result = bench("--jobs", "300", "--samples", "10", "--processes", "1", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["backend"] == "redis"
    assert report["processed"]["jobs"] == 300
    assert report["processed"]["jobs_per_s"] > 0
    assert report["latency"]["samples"] == 10
    other = report["latency_other_process"]
    assert other["samples"] == 10
    assert 0 < other["p50_ms"] <= other["p99_ms"]
    assert [(p["processes"], p["jobs"]) for p in report["processes"]] == [(1, 300), (2, 300)]
    assert all(p["jobs_per_s"] > 0 for p in report["processes"])


def test_bench_on_a_given_server_cleans_up_after_itself(redis_url: str) -> None:
    result = bench("--url", redis_url, "--loop", "trio", "--jobs", "200", "--samples", "5")
    assert result.returncode == 0, result.stderr
    assert "processed" in result.stdout
    assert "latency p50, other process" in result.stdout
    with redis.Redis.from_url(redis_url) as client:
        assert client.dbsize() == 0


def test_url_is_only_for_redis() -> None:
    command = [sys.executable, "-m", "blamequeue._cli", "bench", "--url", "redis://x"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert result.returncode != 0
    assert "--url is for --backend redis" in result.stderr


def test_the_temporary_server_helper_stops_what_it_started() -> None:
    server = RedisServer()
    server.start()
    assert server.running
    server.cleanup()
    assert not server.running
    assert not server.directory.exists()
