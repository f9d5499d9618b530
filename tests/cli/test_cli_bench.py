"""``blamequeue bench``: the SPEC §13 numbers, as JSON for scripts and a table for people.
Speeds are never asserted: they belong to the machine."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

RunCli = Callable[..., subprocess.CompletedProcess[str]]

TOP_KEYS = {
    "blamequeue",
    "python",
    "platform",
    "backend",
    "loop",
    "jobs",
    "concurrency",
    "enqueue",
    "enqueue_in_flight",
    "enqueue_many",
    "processed",
    "latency",
    "lateness",
    "backlog",
    "processes",
    "peak_rss_mib",
}


def test_bench_json_on_memory_has_every_measurement(run_cli: RunCli) -> None:
    result = run_cli("bench", "--backend", "memory", "--jobs", "2000", "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == TOP_KEYS  # no other process can share a memory backend
    assert report["backend"] == "memory"
    assert report["jobs"] == 2000
    assert report["enqueue"]["jobs"] == 2000
    assert report["enqueue_in_flight"]["jobs"] == 2000
    assert report["enqueue_in_flight"]["in_flight"] == 50
    assert report["enqueue_many"]["jobs"] == 2000
    assert report["processed"]["jobs"] == 2000
    for section in ("enqueue", "enqueue_in_flight", "enqueue_many", "processed"):
        assert report[section]["jobs_per_s"] > 0
    assert report["latency"]["samples"] == 200
    assert 0 < report["latency"]["p50_ms"] <= report["latency"]["p99_ms"]
    assert report["peak_rss_mib"] > 0
    assert report["backlog"] == []
    assert report["processes"] == []
    # Delayed jobs and backoff retries, started after their due time (never before it).
    lateness = report["lateness"]
    assert set(lateness) == {"delayed", "retry"}
    assert (lateness["delayed"]["samples"], lateness["retry"]["samples"]) == (30, 20)
    for late in lateness.values():
        assert 0 <= late["p50_ms"] <= late["p99_ms"] <= late["max_ms"]


def test_bench_on_local_with_a_backlog_on_trio(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "bench.db"
    result = run_cli(
        "bench",
        "--backend",
        "local",
        "--loop",
        "trio",
        "--jobs",
        "300",
        "--samples",
        "20",
        "--backlog",
        "100",
        "500",
        "--processes",
        "2",
        "--path",
        str(db),
        "--json",
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["backend"], report["loop"]) == ("local", "trio")
    assert [(b["pending"], b["jobs"]) for b in report["backlog"]] == [(100, 100), (500, 300)]
    # The file is shared with a worker process of the bench's own: enqueue here, start there.
    other = report["latency_other_process"]
    assert other["samples"] == 20
    assert 0 < other["p50_ms"] <= other["p99_ms"]
    late = report["lateness"]["delayed_other_process"]
    assert late["samples"] == 30
    assert 0 <= late["p50_ms"] <= late["p99_ms"]
    # Two worker processes of the bench's own drained a queue it filled, sharing the file.
    [drained] = report["processes"]
    assert (drained["processes"], drained["jobs"], drained["concurrency"]) == (2, 300, 50)
    assert drained["jobs_per_s"] > 0
    assert db.exists()  # --path is kept


def test_bench_processes_only_on_backends_other_processes_share(run_cli: RunCli) -> None:
    result = run_cli("bench", "--backend", "memory", "--processes", "2")
    assert result.returncode == 2
    assert "--processes is for --backend local or redis, not memory" in result.stderr


def test_bench_prints_a_table_for_people(run_cli: RunCli) -> None:
    result = run_cli("bench", "--backend", "memory", "--jobs", "200", "--samples", "10")

    assert result.returncode == 0, result.stderr
    metrics = ("enqueue", "enqueue (50 in flight)", "enqueue_many", "processed", "latency p50")
    metrics += ("latency p99", "RSS")
    for metric in (*metrics, "lateness, delayed jobs", "lateness, backoff retries"):
        assert metric in result.stdout
    assert "jobs/s" in result.stdout


def test_bench_refuses_an_existing_database(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    db.write_text("")

    result = run_cli("bench", "--path", str(db))

    assert result.returncode == 2
    assert "already exists" in result.stderr


def test_bench_on_redis_without_the_testing_distribution_says_what_to_install(
    run_cli: RunCli,
) -> None:
    # The throwaway servers come from blamequeue-testing's plugin (entry point "memory"), never
    # from an import in core: without it, one line says what to install.
    result = run_cli("bench", "--backend", "redis", env={"BLAMEQUEUE_DISABLE_PLUGINS": "memory"})

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --backend redis needs blamequeue-testing, which sets up the bench's server: "
        "pip install 'blamequeue-testing[redis]'"
    ]


def test_bench_on_sqs_without_the_testing_distribution_says_what_to_install(
    run_cli: RunCli,
) -> None:
    result = run_cli(
        "bench",
        "--backend",
        "sqs",
        "--endpoint-url",
        "http://127.0.0.1:9",
        env={"BLAMEQUEUE_DISABLE_PLUGINS": "memory"},
    )

    assert result.returncode == 2
    assert "pip install 'blamequeue-testing[sqs]'" in result.stderr


def test_bench_on_redis_without_redis_server_says_to_install_it_or_pass_url(
    run_cli: RunCli, tmp_path: Path
) -> None:
    result = run_cli("bench", "--backend", "redis", env={"PATH": str(tmp_path)})

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "redis-server is not on PATH" in line
    assert line.endswith("or pass --url redis://HOST:PORT/DB")
