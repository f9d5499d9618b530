"""``blamequeue health`` and ``blamequeue metrics``, as an operator (or a probe) runs them."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import QUEUE, RunCli, json_of, seed


def test_health_exit_codes_follow_the_status(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    seed(db, pending=3, dead=1, done=3)
    healthy = run_cli("health", "--path", str(db))
    assert healthy.returncode == 0, healthy.stderr
    assert healthy.stdout.startswith("healthy")
    assert QUEUE in healthy.stdout
    degraded = run_cli("health", "--path", str(db), "--max-pending", "2", "--json")
    assert degraded.returncode == 1
    report = json.loads(degraded.stdout)
    assert report["status"] == "degraded"
    [queue] = report["queues"]
    assert (queue["pending"], queue["dead"]) == (3, 1)
    assert report["alerts"][0]["check"] == "pending"
    unhealthy = run_cli("health", "--path", str(db), "--max-dead", "0")
    assert unhealthy.returncode == 2
    assert "critical: queue" in unhealthy.stdout
    bad = run_cli("health", "--path", str(db), "--max-error-rate", "2")
    assert bad.returncode == 2
    assert "max_error_rate" in bad.stderr


def test_metrics_shows_what_the_workers_did(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    seed(db, dead=2, done=3)
    figures = json_of(run_cli("metrics", QUEUE, "--path", str(db), "--json", "--window", "600"))
    assert (figures["succeeded"], figures["failed"], figures["dead"]) == (3, 2, 2)
    assert len(figures["minutes"]) == 10
    assert [e["error"].startswith("ValueError") for e in figures["recent_errors"]] == [True] * 2
    text = run_cli("metrics", QUEUE, "--path", str(db))
    assert text.returncode == 0, text.stderr
    assert "3 succeeded, 2 failed (2 dead)" in text.stdout
    assert "cannot send" in text.stdout


def test_pause_and_resume(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    seed(db, pending=1)
    paused = run_cli("pause", QUEUE, "--path", str(db))
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == f"queue {QUEUE!r} is paused"
    again = json_of(run_cli("pause", QUEUE, "--path", str(db), "--json"))
    assert again == {"queue": QUEUE, "paused": True, "changed": False}
    counts = json_of(run_cli("queues", "--path", str(db), "--json"))["queues"]
    assert counts[0]["pending"] == 1
    resumed = json_of(run_cli("resume", QUEUE, "--path", str(db), "--json"))
    assert resumed == {"queue": QUEUE, "paused": False, "changed": True}
