"""The README's tour runs as pasted: a newcomer's first script works on the SQLite default."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def tour() -> str:
    text = README.read_text("utf-8")
    match = re.search(
        r"--8<-- \[start:tour\].*?\n```python\n(?P<code>.*?)\n```\n.*?--8<-- \[end:tour\]",
        text,
        flags=re.DOTALL,
    )
    assert match, "README.md has no tour block between the --8<-- [start:tour] / [end:tour] marks"
    return match.group("code")


def run(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, script.name],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tour_is_short() -> None:
    assert len(tour().splitlines()) <= 25


def test_the_tour_runs_and_shows_a_job_done_and_one_dead_letter(tmp_path: Path) -> None:
    script = tmp_path / "tour.py"
    script.write_text(tour(), "utf-8")
    for _ in range(2):  # pasted and run twice, it starts clean
        done = run(script)
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "sent to ada@example.com (attempt 1)" in out
        assert "TickResult(leased=2, succeeded=1, failed=1" in out
        assert out.count("dead letter:") == 1
        assert "mailbox does not exist" in out
    assert (tmp_path / "blamequeue.db").exists()  # the SQLite default, in the working directory
