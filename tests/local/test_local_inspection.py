"""The local backend's inspection statements: indexed pages, the worker table beside the jobs
table (custom names, attached schemas, tables made by an earlier version), several processes."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from local_helpers import T0, make_backend, names_in, new_job

from blamequeue.abc import WorkerRecord
from blamequeue_local import LocalBackend, connect

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    yield backend
    await backend.close()


def worker(
    worker_id: str = "worker-1", *, heartbeat_at: float = T0, queue: str = "q"
) -> WorkerRecord:
    return WorkerRecord(
        id=worker_id,
        queue=queue,
        host="host-a",
        pid=123,
        concurrency=4,
        started_at=T0 - 10,
        heartbeat_at=heartbeat_at,
        in_flight=2,
        succeeded=7,
        failed=1,
    )


async def test_a_page_is_an_index_range_walk(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    try:
        store = backend.store
        assert store is not None
        plan = await store.execute_all(
            "EXPLAIN QUERY PLAN " + backend._sql.list_jobs, ("q", "pending", 0, 10)
        )
        detail = " ".join(str(row[3]) for row in plan)
        assert "blamequeue_jobs_list_idx" in detail
        assert "TEMP B-TREE" not in detail  # no sort: the index is already in seq order
    finally:
        await backend.close()


async def test_the_worker_table_sits_beside_a_custom_jobs_table(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    backend = make_backend(path=str(path), table="app_jobs", schema="main")
    await backend.open()
    try:
        await backend.worker_heartbeat(worker())
        assert await backend.list_workers(alive_since=T0) == [worker()]
    finally:
        await backend.close()
    assert {"app_jobs", "app_jobs_workers", "app_jobs_list_idx"} <= names_in(path)
    assert "blamequeue_jobs_workers" not in names_in(path)


async def test_the_worker_table_of_an_attached_schema_stays_in_it(tmp_path: Path) -> None:
    connection = connect(tmp_path / "app.db")
    connection.execute("ATTACH DATABASE ? AS side", (str(tmp_path / "side.db"),))
    backend = make_backend(store=connection, schema="side", table="jobs")
    try:
        await backend.open()
        await backend.worker_heartbeat(worker())
        assert [w.id for w in await backend.list_workers(alive_since=T0)] == ["worker-1"]
        await backend.close()
    finally:
        connection.close()
    assert "jobs_workers" in names_in(tmp_path / "side.db")
    assert "jobs_workers" not in names_in(tmp_path / "app.db")


async def test_opening_a_table_of_an_earlier_version_adds_the_index_and_worker_table(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    first = make_backend(path=str(path))
    await first.open()
    await first.enqueue([new_job(id="old-1")])
    await first.close()
    editor = sqlite3.connect(path)
    editor.execute('DROP INDEX "blamequeue_jobs_list_idx"')
    editor.execute('DROP TABLE "blamequeue_jobs_workers"')
    editor.commit()
    editor.close()

    again = make_backend(path=str(path))
    await again.open()
    try:
        page = await again.list_jobs("q", state=None, limit=10, cursor=None)
        assert [job.id for job in page.jobs] == ["old-1"]
        await again.worker_heartbeat(worker())
    finally:
        await again.close()
    assert {"blamequeue_jobs_list_idx", "blamequeue_jobs_workers"} <= names_in(path)


async def test_a_heartbeat_replaces_the_record_and_gone_deletes_it(
    backend: LocalBackend,
) -> None:
    await backend.worker_heartbeat(worker())
    later = WorkerRecord(
        id="worker-1",
        queue="q",
        host="host-a",
        pid=123,
        concurrency=4,
        started_at=T0 - 10,
        heartbeat_at=T0 + 5,
        in_flight=0,
        succeeded=9,
        failed=1,
    )
    await backend.worker_heartbeat(later)
    assert await backend.list_workers(alive_since=T0) == [later]
    await backend.worker_gone("worker-1")
    await backend.worker_gone("worker-1")  # unknown ids are ignored
    assert await backend.list_workers(alive_since=0) == []


async def test_records_of_dead_workers_are_deleted_when_listed(backend: LocalBackend) -> None:
    await backend.worker_heartbeat(worker("worker-dead", heartbeat_at=T0 - 100))
    await backend.worker_heartbeat(worker("worker-live", heartbeat_at=T0))
    assert [w.id for w in await backend.list_workers(alive_since=T0 - 15)] == ["worker-live"]
    assert [w.id for w in await backend.list_workers(alive_since=0)] == ["worker-live"]


async def test_workers_are_ordered_by_queue_then_start(backend: LocalBackend) -> None:
    await backend.worker_heartbeat(worker("worker-b", queue="b"))
    await backend.worker_heartbeat(worker("worker-a", queue="a"))
    assert [w.id for w in await backend.list_workers(alive_since=0)] == ["worker-a", "worker-b"]


async def test_another_connection_sees_the_workers_and_counts(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    one, two = make_backend("one", path=path), make_backend("two", path=path)
    await one.open()
    await two.open()
    try:
        await one.enqueue([new_job(id="a"), new_job(id="b", queue="other")])
        await one.worker_heartbeat(worker())
        assert [w.id for w in await two.list_workers(alive_since=0)] == ["worker-1"]
        counts = await two.queue_counts()
        assert counts["q"]["pending"] == 1
        assert counts["other"] == {
            "pending": 1,
            "inflight": 0,
            "parked": 0,
            "done": 0,
            "dead": 0,
            "cancelled": 0,
        }
        stored = await two.get_job("a")
        assert stored is not None
        assert stored.state == "pending"
    finally:
        await one.close()
        await two.close()
