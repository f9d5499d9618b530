"""The local backend's retention limits (``prune_finished``): each statement walks an index,
never the table, and the index of finished jobs is made only once ``retain_done_count`` is
used."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_helpers import make_backend, names_in

from blamequeue.abc import Retention
from blamequeue_local import LocalBackend

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000.0


async def plan(backend: LocalBackend, sql: str, params: tuple[object, ...]) -> str:
    store = backend.store
    assert store is not None
    rows = await store.execute_all("EXPLAIN QUERY PLAN " + sql, params)
    return " | ".join(str(row[3]) for row in rows)


async def test_dead_job_limits_walk_the_dead_letter_index(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    try:
        sql = backend._sql
        for statement, params in (
            (sql.dead_queues, ()),
            (sql.prune_dead, ("q", T0)),
            (sql.trim_dead, ("q", 10)),
        ):
            detail = await plan(backend, statement, params)
            assert "blamequeue_jobs_dlq_idx" in detail, detail
            assert "SCAN blamequeue_jobs " not in detail + " ", detail  # never the table
    finally:
        await backend.close()


async def test_the_finished_index_is_made_when_retain_done_count_is_first_used(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path))
    await backend.open()
    try:
        await backend.prune_finished(now=T0, retention=Retention(dead=60, dead_count=5))
        assert "blamequeue_jobs_finished_idx" not in names_in(path)
        await backend.prune_finished(now=T0, retention=Retention(done_count=5))
        assert "blamequeue_jobs_finished_idx" in names_in(path)
        sql = backend._sql
        for statement, params in ((sql.finished_queues, ()), (sql.trim_finished, ("q", 10))):
            detail = await plan(backend, statement, params)
            assert "blamequeue_jobs_finished_idx" in detail, detail
            assert "SCAN blamequeue_jobs " not in detail + " ", detail
    finally:
        await backend.close()
