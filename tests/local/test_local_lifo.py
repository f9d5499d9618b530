"""Lifo on the local backend beyond the conformance suite: both enqueue paths, the limited
lease and next_due with lifo lanes, the lease staying an index walk, and a table made before
lifo upgrading on open."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
from local_helpers import T0, leased_ids, make_backend, new_job

from blamequeue.abc import LeaseLimits, NewJob, Settlement
from blamequeue_local import LocalBackend
from blamequeue_local._statements import Statements

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


def lifo_job(id: str, **fields: object) -> NewJob:
    return attrs.evolve(new_job(id=id, **fields), lifo=True)  # type: ignore[arg-type]


async def plan_of(backend: LocalBackend, sql: str, params: tuple[object, ...]) -> str:
    store = backend.store
    assert store is not None
    plan = await store.execute_all("EXPLAIN QUERY PLAN " + sql, params)
    return " | ".join(str(row[3]) for row in plan)


async def test_lease_order_puts_the_lifo_lane_of_each_priority_first(
    backend: LocalBackend,
) -> None:
    await backend.enqueue(
        [
            new_job(id="plain-early", available_at=T0 - 5),
            new_job(id="plain"),
            lifo_job("lifo-early", available_at=T0 - 5),
            lifo_job("lifo-a"),
            lifo_job("lifo-b"),
            new_job(id="high", priority=1),
            lifo_job("high-lifo", priority=1, available_at=T0 - 9),
            lifo_job("low-lifo", priority=-1),
        ]
    )
    # Priority first; within one, the lifo jobs (latest due, then latest enqueued, first),
    # then the others (earliest due first).  The rows come back sorted whatever the limit.
    assert await leased_ids(backend, limit=3) == ["high-lifo", "high", "lifo-b"]
    assert await leased_ids(backend) == [
        "lifo-a",
        "lifo-early",
        "plain-early",
        "plain",
        "low-lifo",
    ]


@pytest.mark.parametrize("count", [2, 2049])
async def test_both_enqueue_paths_store_lifo_and_parked(backend: LocalBackend, count: int) -> None:
    # Up to 2048 jobs bind their entry (state and lifo) as one parameter, more travel as JSON.
    plain = [new_job(id=f"plain-{n:05d}") for n in range(count - 2)]
    parked = attrs.evolve(lifo_job("parked-lifo"), parked=True)
    await backend.enqueue([*plain, lifo_job("lifo"), parked, new_job(id="last")])
    store = backend.store
    assert store is not None
    entries = await store.execute_all(
        "SELECT id, state, lifo FROM blamequeue_jobs WHERE id IN ('lifo', 'parked-lifo', 'last')"
        " ORDER BY seq",
        (),
    )
    assert [tuple(row) for row in entries] == [
        ("lifo", "pending", 1),
        ("parked-lifo", "parked", 1),
        ("last", "pending", 0),
    ]
    assert (await leased_ids(backend, limit=2)) == ["lifo", "plain-00000" if plain else "last"]


async def test_chosen_and_unique_ids_keep_lifo(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="plain")])
    assert await backend.enqueue_absent([lifo_job("chosen")]) == [True]
    held = await backend.enqueue_unique(lifo_job("unique"), unique_key="k", hold_until=None, now=T0)
    assert held == "unique"
    assert await leased_ids(backend) == ["unique", "chosen", "plain"]


async def test_a_released_flow_job_is_lifo_when_it_comes_due(backend: LocalBackend) -> None:
    parent = attrs.evolve(new_job(id="parent"), flow_id="f")
    child = attrs.evolve(lifo_job("child"), flow_id="f", depends_on=("parent",), parked=True)
    await backend.enqueue([parent, child])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    await backend.enqueue([new_job(id="waiting")])
    done = Settlement(job_id="parent", token=lease.token, outcome="done", at=T0 + 1)
    assert await backend.settle([done], now=T0 + 1) == [True]
    assert await leased_ids(backend, now=T0 + 1) == ["child", "waiting"]


async def test_a_limited_lease_keeps_the_lifo_order(backend: LocalBackend) -> None:
    await backend.enqueue(
        [
            new_job(id="a"),
            attrs.evolve(lifo_job("b"), group_key="g"),
            attrs.evolve(lifo_job("c"), group_key="g"),
            lifo_job("d"),
        ]
    )
    leases = await backend.lease_limited(
        "q", limit=10, now=T0, lease_seconds=30.0, limits=LeaseLimits(group_concurrency=1)
    )
    # c and b share a group with room for one: c, the later lifo job, goes; b waits.
    assert [lease.job.id for lease in leases] == ["d", "c", "a"]


async def test_next_due_sees_both_lanes(backend: LocalBackend) -> None:
    await backend.enqueue(
        [
            lifo_job("lifo-late", available_at=T0 + 30),
            lifo_job("lifo-early", available_at=T0 + 10),
            new_job(id="plain", available_at=T0 + 20),
        ]
    )
    assert await backend.next_due("q", now=T0) == T0 + 10
    await backend.enqueue([new_job(id="high", priority=2, available_at=T0 + 5)])
    assert await backend.next_due("q", now=T0) == T0 + 5


async def test_the_lease_walks_the_lease_index_without_sorting(backend: LocalBackend) -> None:
    sql = backend._sql
    lease = await plan_of(backend, sql.lease, ("t", T0 + 30, "q", T0, 10))
    assert "blamequeue_jobs_lease_order_idx" in lease
    assert "TEMP B-TREE" not in lease, lease
    assert "SCAN blamequeue_jobs " not in lease + " ", lease
    limited = await plan_of(backend, sql.lease_limited, ("t", T0 + 30, "q", T0, 10, None, None))
    assert "blamequeue_jobs_lease_order_idx" in limited
    assert "SCAN blamequeue_jobs " not in limited + " ", limited
    next_due = await plan_of(backend, sql.next_due, ("q",))
    assert "SCAN blamequeue_jobs " not in next_due + " ", next_due
    assert "TEMP B-TREE" not in next_due, next_due


# The jobs table and lease index as the versions before lifo created them.
_BEFORE_LIFO_INDEX = (
    'CREATE INDEX "blamequeue_jobs_lease_idx" '
    'ON "blamequeue_jobs" (queue, state, priority DESC, available_at, seq)'
)


async def test_a_table_from_before_lifo_is_upgraded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path)
    connection.execute(Statements("blamequeue_jobs", None).schema[0])
    connection.execute('ALTER TABLE "blamequeue_jobs" DROP COLUMN lifo')
    connection.execute(_BEFORE_LIFO_INDEX)
    for job_id, at in (("old-1", T0), ("old-2", T0 - 1)):
        connection.execute(
            'INSERT INTO "blamequeue_jobs" (id, queue, state, payload, priority, max_attempts, '
            "created_at, available_at) VALUES (?, 'q', 'pending', '1', 0, 5, ?, ?)",
            (job_id, T0, at),
        )
    connection.commit()
    connection.close()

    for _ in range(2):  # opening again finds the column and the index and leaves them alone
        backend = make_backend(path=str(path))
        await backend.open()
        await backend.close()

    reader = sqlite3.connect(path)
    try:
        columns = [row[1] for row in reader.execute("PRAGMA table_info(blamequeue_jobs)")]
        indexes = {
            name for (name,) in reader.execute("SELECT name FROM sqlite_master WHERE type='index'")
        }
    finally:
        reader.close()
    assert columns.count("lifo") == 1
    assert "blamequeue_jobs_lease_order_idx" in indexes
    assert "blamequeue_jobs_lease_idx" not in indexes

    backend = make_backend(path=str(path))
    await backend.open()
    try:
        await backend.enqueue([lifo_job("new-lifo")])
        # The old jobs are plain ones, in their old order, behind the new lifo job.
        assert await leased_ids(backend) == ["new-lifo", "old-2", "old-1"]
    finally:
        await backend.close()
