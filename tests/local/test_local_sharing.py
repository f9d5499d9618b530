"""One database file, several connections: durability, concurrent leasing, lock and disk
failures mapped to QueueError, and cross-process wake-up."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from local_helpers import T0, make_backend, new_job

from blamequeue.errors import BackendUnavailableError
from blamequeue_local import LocalBackend, connect

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    yield backend
    await backend.close()


async def pragma(backend: LocalBackend, name: str) -> object:
    assert backend.store is not None
    row = await backend.store.execute_one(f"PRAGMA {name}", ())
    assert row is not None
    return row[0]


# -- durability -------------------------------------------------------------------------------
async def test_default_durability_is_wal_with_synchronous_normal(backend: LocalBackend) -> None:
    assert await pragma(backend, "journal_mode") == "wal"
    assert await pragma(backend, "synchronous") == 1


async def test_full_durability_sets_synchronous_full(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"), durability="full", busy_timeout=2.0)
    await backend.open()
    try:
        assert await pragma(backend, "synchronous") == 2
        assert await pragma(backend, "busy_timeout") == 2000
    finally:
        await backend.close()


# -- several connections on one file ----------------------------------------------------------
async def test_backends_opening_one_file_at_once_all_succeed(tmp_path: Path) -> None:
    backends = [make_backend(f"b{n}", path=str(tmp_path / "jobs.db")) for n in range(6)]
    async with anyio.create_task_group() as tg:
        for backend in backends:
            tg.start_soon(backend.open)
    try:
        await backends[0].enqueue([new_job(id="shared")])
        assert await backends[-1].size("q") == 1
    finally:
        for backend in backends:
            await backend.close()


async def test_two_backends_on_one_file_never_lease_the_same_job(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    first, second = make_backend("a", path=path), make_backend("b", path=path)
    await first.open()
    await second.open()
    try:
        ids = [f"job-{n:04d}" for n in range(300)]
        await first.enqueue([new_job(id=job_id) for job_id in ids])
        taken: list[str] = []

        async def drain(backend: LocalBackend) -> None:
            while True:
                leases = await backend.lease("q", limit=7, now=T0, lease_seconds=30.0)
                if not leases:
                    return
                taken.extend(lease.job.id for lease in leases)

        async with anyio.create_task_group() as tg:
            for backend in (first, second, first, second):
                tg.start_soon(drain, backend)
        assert sorted(taken) == ids  # every job once, none twice
    finally:
        await first.close()
        await second.close()


# -- failures mapped at the boundary ----------------------------------------------------------
async def test_a_locked_database_is_a_retryable_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path), busy_timeout=0.01)
    await backend.open()
    holder = connect(path)
    holder.execute("BEGIN EXCLUSIVE")  # hold the write lock past busy_timeout
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await backend.enqueue([new_job()])
        assert info.value.retryable
        assert info.value.code == "queue/backend-unavailable"
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await backend.enqueue([new_job()])  # and it works once the lock is gone
    await backend.close()


async def test_a_full_disk_is_a_permanent_error_and_stores_nothing(tmp_path: Path) -> None:
    connection = connect(tmp_path / "small.db")
    backend = make_backend(store=connection)
    await backend.open()
    (pages,) = connection.execute("PRAGMA page_count").fetchone()
    connection.execute(f"PRAGMA max_page_count = {pages + 2}")  # a disk about to fill up
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await backend.enqueue([new_job(payload="x" * 4000) for _ in range(50)])
        assert not info.value.retryable
        assert "full" in info.value.message
        assert await backend.size("q") == 0
    finally:
        await backend.close()
        connection.close()


async def test_a_read_only_database_is_a_permanent_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    setup = make_backend(path=str(path))
    await setup.open()
    await setup.close()
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    backend = make_backend(store=connection)
    await backend.open()
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await backend.enqueue([new_job()])
        assert not info.value.retryable
        assert "read-only" in info.value.message
    finally:
        await backend.close()
        connection.close()


async def test_a_corrupt_file_is_a_permanent_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(b"this is not a database, " * 200)
    backend = make_backend(path=str(path))
    with pytest.raises(BackendUnavailableError) as info:
        await backend.open()
    assert not info.value.retryable
    assert "corrupt" in info.value.message


async def test_a_missing_directory_is_a_permanent_error(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "no-such-dir" / "jobs.db"))
    with pytest.raises(BackendUnavailableError) as info:
        await backend.open()
    assert not info.value.retryable
    assert "directory" in info.value.message


async def test_a_closed_connection_is_a_permanent_error(tmp_path: Path) -> None:
    connection = connect(tmp_path / "app.db")
    backend = make_backend(store=connection)
    await backend.open()
    connection.close()
    with pytest.raises(BackendUnavailableError) as info:
        await backend.size("q")
    assert not info.value.retryable
    assert "closed" in info.value.message
    await backend.close()


# -- cross-process wake-up --------------------------------------------------------------------
async def test_wait_for_work_returns_early_when_another_connection_commits(
    backend: LocalBackend, tmp_path: Path
) -> None:
    assert await backend.lease("q", limit=1, now=T0, lease_seconds=30.0) == []
    other = connect(tmp_path / "jobs.db")
    try:
        with anyio.fail_after(30):  # a guard against hanging, far below the wait's timeout
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: backend.wait_for_work("q", timeout=600.0))
                other.execute(
                    "INSERT INTO blamequeue_jobs (id, queue, state, payload, priority,"
                    " max_attempts, created_at, available_at)"
                    " VALUES ('job-x', 'q', 'pending', '{}', 0, 5, 0, 0)"
                )
    finally:
        other.close()
    leases = await backend.lease("q", limit=1, now=T0, lease_seconds=1.0)
    assert [lease.job.id for lease in leases] == ["job-x"]


async def test_wait_for_work_notices_a_commit_made_before_it_started(
    backend: LocalBackend, tmp_path: Path
) -> None:
    assert await backend.lease("q", limit=1, now=T0, lease_seconds=30.0) == []
    writer = make_backend("writer", path=str(tmp_path / "jobs.db"))
    await writer.open()
    await writer.enqueue([new_job(id="early")])
    await writer.close()
    with anyio.fail_after(30):
        await backend.wait_for_work("q", timeout=600.0)


async def test_wait_for_work_returns_after_its_timeout_when_nothing_happens(
    backend: LocalBackend,
) -> None:
    await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    with anyio.fail_after(30):
        await backend.wait_for_work("q", timeout=0.05)
        await backend.wait_for_work("other", timeout=0.0)
