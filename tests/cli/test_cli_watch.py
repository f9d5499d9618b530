"""``blamequeue watch QUEUE``: another process's events, printed as JSON lines (or one line
each for a person), on both event loops."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from blamequeue import Job, JobContext, Queue

SpawnCli = Callable[..., subprocess.Popen[str]]
WaitUntil = Callable[..., None]
RunCli = Callable[..., subprocess.CompletedProcess[str]]


async def _fail(job: Job, ctx: JobContext) -> None:
    raise ValueError("secret customer 42")


def _produce_and_work(db: Path) -> str:
    async def main() -> str:
        async with Queue(backends={"local": {"protocol": "local", "path": str(db)}}) as queue:
            job_id = await queue.enqueue("emails", {"to": "a@example.com"}, max_attempts=1)
            await queue.tick("emails", _fail)
            return job_id

    return anyio.run(main)


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_watch_prints_the_events_of_another_process(
    tmp_path: Path, spawn_cli: SpawnCli, wait_until: WaitUntil, loop: str
) -> None:
    db = tmp_path / "jobs.db"
    events = ["job.added", "job.processing", "job.failed", "job.dead"]
    only = [part for name in events for part in ("--event", name)]
    watcher = spawn_cli(
        "watch", "emails", "--path", str(db), "--json", "--count", "4", "--loop", loop, *only
    )
    stderr = tmp_path / "stderr-0.txt"
    wait_until(lambda: "watching" in stderr.read_text(), "the watch to open")
    job_id = _produce_and_work(db)
    assert watcher.wait(timeout=20) == 0, stderr.read_text()
    lines = [json.loads(line) for line in (tmp_path / "stdout-0.txt").read_text().splitlines()]
    assert [(line["name"], line["job_id"]) for line in lines] == [(n, job_id) for n in events]
    assert lines[-1]["data"] == {"attempts": 1, "error_type": "ValueError"}
    # What the store carried is what an operator may read: never the payload or the message.
    printed = (tmp_path / "stdout-0.txt").read_text()
    assert "secret" not in printed
    assert "a@example.com" not in printed


def test_watch_refuses_an_unknown_event_name(run_cli: RunCli, tmp_path: Path) -> None:
    done = run_cli("watch", "emails", "--path", str(tmp_path / "jobs.db"), "--event", "job.dne")
    assert done.returncode == 2
    assert "job.done" in done.stderr or "job.dead" in done.stderr  # the closest names
