"""``blamequeue demo``: a newcomer sees the whole lifecycle, on SQLite, and nothing is left
behind."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_demo_narrates_the_whole_lifecycle_and_removes_its_database(run_cli: RunCli) -> None:
    result = run_cli("demo")

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr  # a failing job is one log line, not a traceback
    out = result.stdout
    steps = [
        "[1/7] Enqueue.",
        "[2/7] Priority.",
        "[3/7] Delay.",
        "[4/7] Retries.",
        "[5/7] Dead-letter queue.",
        "[6/7] Operator retry.",
        "[7/7] A busy queue.",
        "Final counts",
    ]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions)
    # The priority job, enqueued last, runs before the ones enqueued earlier.
    assert out.index("ran password reset for alan") < out.index("ran welcome email to ada")
    assert "ran reminder to ada  <- delay 2 s" in out
    # The default backoff, announced as the engine schedules it.
    assert "retry scheduled in 1 s" in out
    assert "retry scheduled in 2 s" in out
    assert "attempt 3 of 5 (after waiting" in out
    # The DLQ row, then the operator's retry.
    assert "out of attempts: moved to the dead-letter queue" in out
    assert re.search(r"job-\w{26}\s+3\s+ValueError: row 7: invalid date", out)
    assert "dlq_retry -> True" in out
    assert "200/200 100%" in out  # the progress bar, as plain lines off a terminal
    assert "\r" not in out
    assert "\x1b[" not in out
    database = re.search(r"at (\S+demo\.db) \(deleted afterwards", out)
    assert database is not None
    assert not Path(database.group(1)).exists()


def test_demo_refuses_to_write_into_an_existing_file(run_cli: RunCli, tmp_path: Path) -> None:
    precious = tmp_path / "precious.db"
    precious.write_text("data")

    result = run_cli("demo", "--path", str(precious))

    assert result.returncode == 2
    assert "already exists" in result.stderr
    assert precious.read_text() == "data"


def test_demo_stopped_by_sigterm_exits_130_and_cleans_up(
    spawn_cli: Callable[..., subprocess.Popen[str]],
    wait_until: Callable[..., None],
    tmp_path: Path,
) -> None:
    proc = spawn_cli("demo")
    stdout = tmp_path / "stdout-0.txt"
    # Step 3 waits 2 s for the delayed job: a moment when a worker is busy.
    wait_until(lambda: "[3/7]" in stdout.read_text(), "the demo to reach step 3")
    proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=20) == 130
    assert "interrupted" in (tmp_path / "stderr-0.txt").read_text()
    database = re.search(r"at (\S+demo\.db) \(deleted afterwards", stdout.read_text())
    assert database is not None
    assert not Path(database.group(1)).parent.exists()
