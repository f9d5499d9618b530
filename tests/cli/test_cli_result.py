"""``blamequeue result JOB_ID``: a job's result as JSON, its failure or absence as exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from cli_helpers import QUEUE, RunCli, json_of, local_queue

from blamequeue import Job, JobContext


async def _total(job: Job, ctx: JobContext) -> dict[str, int]:
    return {"total": job.payload["n"] * 2}


async def _fail(job: Job, ctx: JobContext) -> None:
    raise ValueError(f"cannot add {job.payload['n']}")


def _seed(db: Path) -> dict[str, str]:
    async def go() -> dict[str, str]:
        async with local_queue(db) as q:
            done = await q.enqueue(QUEUE, {"n": 21})
            await q.tick(QUEUE, _total)
            dead = await q.enqueue(QUEUE, {"n": 1}, max_attempts=1)
            await q.tick(QUEUE, _fail)
            pending = await q.enqueue(QUEUE, {"n": 2}, delay=3600)
            return {"done": done, "dead": dead, "pending": pending}

    return anyio.run(go)


def test_result_prints_the_handlers_return_value(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    ids = _seed(db)
    shown = run_cli("result", ids["done"], "--path", str(db))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"total": 42}
    assert json_of(run_cli("result", ids["done"], "--path", str(db), "--json")) == {
        "job_id": ids["done"],
        "backend": "default",
        "result": {"total": 42},
    }


def test_result_exit_codes_say_failed_not_found_or_not_yet(run_cli: RunCli, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    ids = _seed(db)
    failed = run_cli("result", ids["dead"], "--path", str(db))
    assert failed.returncode == 1
    assert "queue/job-failed" in failed.stderr
    assert "ValueError: cannot add 1" in failed.stderr
    missing = run_cli("result", "job-nope", "--path", str(db))
    assert missing.returncode == 3
    assert "queue/job-not-found" in missing.stderr
    waiting = run_cli("result", ids["pending"], "--path", str(db), "--timeout", "0.1")
    assert waiting.returncode == 1
    assert "queue/result-timeout" in waiting.stderr
    assert "pending" in waiting.stderr
