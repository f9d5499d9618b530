"""``blamequeue cancel JOB_ID`` and cancelled jobs in the listings, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import QUEUE, RunCli, json_of, seed


def test_cancel_ends_a_pending_job_as_cancelled(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    [doomed, kept] = seed(db, pending=2)["pending"]
    result = run_cli("cancel", doomed, "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"cancelled job {doomed}"
    listed = json_of(run_cli("jobs", QUEUE, "--state", "cancelled", "--path", str(db), "--json"))
    assert [(job["id"], job["state"]) for job in listed["jobs"]] == [(doomed, "cancelled")]
    [counts] = json_of(run_cli("queues", "--path", str(db), "--json"))["queues"]
    assert (counts["pending"], counts["cancelled"], counts["size"]) == (1, 1, 1)
    again = run_cli("cancel", doomed, "--path", str(db), "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {"job_id": doomed, "backend": "default", "cancelled": False}
    job = json_of(run_cli("job", kept, "--path", str(db), "--json"))
    assert job["state"] == "pending"


def test_cancel_of_an_unknown_job_exits_3(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    seed(db, pending=1)
    result = run_cli("cancel", "job-00000000000000000000000000", "--path", str(db))
    assert result.returncode == 3
    assert "job-not-found" in result.stderr or "holds no job" in result.stderr


def test_enqueue_timeout_is_checked(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    result = run_cli("enqueue", QUEUE, "null", "--timeout", "0", "--path", str(db))
    assert result.returncode == 2
    assert "--timeout" in result.stderr
