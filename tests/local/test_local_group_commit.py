"""Group commit on the backend's own connection: enqueues sent while a statement runs share one
transaction, yet each caller keeps the meaning of its own call.  Another connection holds the
file's write lock to keep the first statement running while the others queue up behind it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from local_helpers import make_backend, new_job

from blamequeue.errors import BackendUnavailableError, QueueError
from blamequeue_local import _group_commit
from blamequeue_local._store import Fetch

pytestmark = pytest.mark.anyio


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many statements each trip to SQLite took, in order."""
    sizes: list[int] = []
    run_group = _group_commit.run_group

    def counted(
        connection: sqlite3.Connection, statements: Sequence[tuple[str, Sequence[Any], Fetch]]
    ) -> list[tuple[bool, Any]]:
        sizes.append(len(statements))
        return run_group(connection, statements)

    monkeypatch.setattr(_group_commit, "run_group", counted)
    return sizes


def stored_ids(path: Path) -> set[str]:
    """The job ids in the file, read on a connection of its own (what a crash would leave)."""
    reader = sqlite3.connect(path)
    try:
        return {row[0] for row in reader.execute("SELECT id FROM blamequeue_jobs")}
    finally:
        reader.close()


def write_lock(path: Path) -> sqlite3.Connection:
    """Another connection holding the file's write lock until it commits."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


async def test_each_caller_of_a_group_gets_its_own_outcome(
    tmp_path: Path, groups: list[int]
) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path))
    await backend.open()
    try:
        await backend.enqueue([new_job(id="taken")])
        groups.clear()
        outcomes: dict[str, str] = {}

        async def enqueue(job_id: str, payload: str = '{"n": 1}') -> None:
            try:
                await backend.enqueue([new_job(id=job_id, payload=payload)])
            except QueueError as exc:
                outcomes[job_id] = exc.code
            else:
                # Returned: committed, so another connection sees it already.
                assert job_id in stored_ids(path)
                outcomes[job_id] = "stored"

        holder = write_lock(path)
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue, "first")  # runs alone, waiting for the lock
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(enqueue, "ok-1")
            tg.start_soon(enqueue, "taken")  # the id exists
            tg.start_soon(enqueue, "bad", "\ud800")  # SQLite cannot store it
            tg.start_soon(enqueue, "ok-2")
            await anyio.wait_all_tasks_blocked()
            holder.execute("COMMIT")
        holder.close()
    finally:
        await backend.close()

    assert groups == [1, 4]
    assert outcomes == {
        "first": "stored",
        "ok-1": "stored",
        "taken": "queue/bad-argument",
        "bad": "queue/bad-payload",
        "ok-2": "stored",
    }
    assert stored_ids(path) == {"taken", "first", "ok-1", "ok-2"}


async def test_a_caller_cancelled_while_waiting_stores_nothing(
    tmp_path: Path, groups: list[int]
) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path))
    await backend.open()
    groups.clear()
    try:
        holder = write_lock(path)
        async with anyio.create_task_group() as tg:
            tg.start_soon(backend.enqueue, [new_job(id="first")])
            await anyio.wait_all_tasks_blocked()
            waiting = anyio.CancelScope()

            async def cancelled() -> None:
                with waiting:
                    await backend.enqueue([new_job(id="cancelled")])

            tg.start_soon(backend.enqueue, [new_job(id="kept")])
            tg.start_soon(cancelled)
            await anyio.wait_all_tasks_blocked()
            waiting.cancel()
            await anyio.wait_all_tasks_blocked()
            holder.execute("COMMIT")
        holder.close()
    finally:
        await backend.close()

    assert groups == [1, 1]
    assert stored_ids(path) == {"first", "kept"}


async def test_a_group_that_cannot_begin_fails_every_caller(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path), busy_timeout=0.05)
    await backend.open()
    errors: list[QueueError] = []

    async def enqueue(job_id: str) -> None:
        try:
            await backend.enqueue([new_job(id=job_id)])
        except QueueError as exc:
            errors.append(exc)

    try:
        holder = write_lock(path)  # held past busy_timeout
        async with anyio.create_task_group() as tg:
            tg.start_soon(enqueue, "first")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(enqueue, "second")
            tg.start_soon(enqueue, "third")
        holder.execute("COMMIT")
        holder.close()
    finally:
        await backend.close()

    assert len(errors) == 3
    assert all(isinstance(exc, BackendUnavailableError) and exc.retryable for exc in errors)
    assert stored_ids(path) == set()
