"""Shared builders for the CLI tests of the inspection and operation commands (not a test
module): a SQLite queue seeded through the Python API, and the CLI's JSON output parsed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from blamequeue import Job, JobContext, Queue

RunCli = Callable[..., subprocess.CompletedProcess[str]]

QUEUE = "emails"

#: Generous: a loaded CI machine is slow; a hang still fails instead of blocking the suite.
DEADLINE = 20.0


def local_queue(db: Path) -> Queue:
    return Queue(backends={"default": {"protocol": "local", "path": str(db)}})


def seed(
    db: Path, *, pending: int = 0, dead: int = 0, done: int = 0, queue: str = QUEUE
) -> dict[str, list[str]]:
    """Jobs in the given states on ``queue`` (payloads ``{"n": i}``); their ids by state."""

    async def go() -> dict[str, list[str]]:
        ids: dict[str, list[str]] = {"pending": [], "dead": [], "done": []}
        async with local_queue(db) as q:
            for n in range(done):
                ids["done"].append(await q.enqueue(queue, {"n": n, "will": "succeed"}))
                await q.tick(queue, _succeed, max=1)
            for n in range(dead):
                ids["dead"].append(await q.enqueue(queue, {"n": n, "will": "fail"}, max_attempts=1))
                await q.tick(queue, _fail, max=1)
            if pending:
                ids["pending"] = await q.enqueue_many(queue, [{"n": n} for n in range(pending)])
        return ids

    return anyio.run(go)


async def _succeed(job: Job, ctx: JobContext) -> None:
    pass


async def _fail(job: Job, ctx: JobContext) -> None:
    raise ValueError(f"cannot send {job.payload['n']}")


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def sizes(db: Path, queue: str = QUEUE) -> tuple[int, int]:
    """(live jobs, dead jobs) of ``queue``."""

    async def go() -> tuple[int, int]:
        async with local_queue(db) as q:
            return await q.size(queue), await q.dlq_size(queue)

    return anyio.run(go)


def command(*args: str) -> list[str]:
    """The CLI as a user runs it (as conftest's run_cli does)."""
    return [sys.executable, "-m", "blamequeue._cli", *args]


def environment() -> dict[str, str]:
    """The parent's environment without BLAMEQUEUE_* or FORCE_COLOR (as conftest's run_cli)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAMEQUEUE_")}
    env.pop("FORCE_COLOR", None)
    return env
