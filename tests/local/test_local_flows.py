"""Flows on the local backend beyond the conformance suite: the SQL release with several
connections on one file, large batches, and migrating a table made before flows."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import attrs
import pytest
from local_helpers import T0, make_backend, new_job, row_of

from blamequeue.abc import Lease, NewJob, Settlement
from blamequeue_local import LocalBackend, connect
from blamequeue_local._statements import ADDED_COLUMNS, Statements

pytestmark = pytest.mark.anyio


def create_first_release_table(connection: sqlite3.Connection) -> None:
    """The jobs table as the first release created it: today's, less every column added since
    (no depends_on column)."""
    connection.execute(Statements("blamequeue_jobs", None).schema[0])
    for column in ADDED_COLUMNS:
        connection.execute(f'ALTER TABLE "blamequeue_jobs" DROP COLUMN {column}')


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


def flow_job(id: str, *depends_on: str) -> NewJob:
    return attrs.evolve(
        new_job(id=id), flow_id="flow-1", depends_on=depends_on, parked=bool(depends_on)
    )


async def take(backend: LocalBackend, job_id: str) -> Lease:
    """Lease the next due job, which must be ``job_id``."""
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    assert lease.job.id == job_id
    return lease


def done(lease: Lease, at: float = T0 + 5) -> Settlement:
    return Settlement(job_id=lease.job.id, token=lease.token, outcome="done", at=at)


async def test_flow_jobs_come_back_in_enqueue_order_with_their_dependencies(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a"), flow_job("c", "a", "b")])
    jobs = await backend.flow_jobs("flow-1")
    assert [(job.id, job.state, job.depends_on) for job in jobs] == [
        ("a", "pending", ()),
        ("b", "parked", ("a",)),
        ("c", "parked", ("a", "b")),
    ]
    assert await backend.flow_jobs("flow-unknown") == []


async def test_release_is_due_at_the_settlement_time(backend: LocalBackend) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    lease = await take(backend, "a")
    assert await backend.settle([done(lease, at=T0 + 7)], now=T0 + 7) == [True]
    child = await row_of(backend, "b")
    assert child is not None
    assert (child.state, child.available_at) == ("pending", T0 + 7)


async def test_a_stale_completion_releases_nothing(backend: LocalBackend) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    lease = await take(backend, "a")
    stale = attrs.evolve(done(lease), token="not-the-token")
    assert await backend.settle([stale], now=T0) == [False]
    assert (await row_of(backend, "b")).state == "parked"  # type: ignore[union-attr]


async def test_a_failed_attempt_releases_nothing(backend: LocalBackend) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    lease = await take(backend, "a")
    retry = Settlement(job_id="a", token=lease.token, outcome="retry", at=T0 + 1, error="x")
    assert await backend.settle([retry], now=T0) == [True]
    assert (await row_of(backend, "b")).state == "parked"  # type: ignore[union-attr]


async def test_both_dependencies_in_one_batch_release_the_child_once(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b"), flow_job("c", "a", "b")])
    leases = await backend.lease("q", limit=10, now=T0, lease_seconds=30.0)
    assert await backend.settle([done(lease) for lease in leases], now=T0) == [True, True]
    assert [
        lease.job.id for lease in await backend.lease("q", limit=10, now=T0 + 5, lease_seconds=30.0)
    ] == ["c"]


async def test_dependencies_completed_through_two_connections_at_once_release_the_child(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "shared.db")
    first, second = make_backend(path=path), make_backend(path=path)
    await first.open()
    await second.open()
    try:
        for round in range(20):
            ids = [f"r{round}-{n}" for n in range(3)]
            jobs = [flow_job(ids[0]), flow_job(ids[1]), flow_job(ids[2], ids[0], ids[1])]
            await first.enqueue([attrs.evolve(job, flow_id=f"flow-{round}") for job in jobs])
            lease_a = await take(first, ids[0])
            lease_b = await take(second, ids[1])
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(first.settle, [done(lease_a, T0)], now=T0))
                tg.start_soon(functools.partial(second.settle, [done(lease_b, T0)], now=T0))
            child = await row_of(first, ids[2])
            assert child is not None
            assert child.state == "pending", f"round {round}: the join stayed parked"
            assert await take(first, ids[2])
    finally:
        await first.close()
        await second.close()


async def test_a_huge_batch_keeps_its_dependencies(backend: LocalBackend) -> None:
    jobs = [flow_job(f"j{n:05d}") for n in range(2100)] + [flow_job("last", "j00000", "j02099")]
    await backend.enqueue(jobs)
    last = await row_of(backend, "last")
    assert last is not None
    assert (last.state, last.depends_on, last.flow_id) == ("parked", ("j00000", "j02099"), "flow-1")


async def test_sweep_reports_the_jobs_it_repended(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="x"), new_job(id="y", max_attempts=1)])
    await backend.lease("q", limit=10, now=T0, lease_seconds=30.0)
    result = await backend.sweep(now=T0 + 31, retain_done=3600, expired_error="lease expired")
    assert [job.id for job in result.expired] == ["x"]
    assert [job.state for job in result.expired] == ["pending"]
    assert [job.id for job in result.dead] == ["y"]
    assert result.repended == 1


async def test_a_table_from_before_flows_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path)
    create_first_release_table(connection)
    connection.execute(
        'INSERT INTO "blamequeue_jobs" (id, queue, state, payload, priority, max_attempts, '
        "created_at, available_at) VALUES ('old', 'q', 'pending', '1', 0, 5, ?, ?)",
        (T0, T0),
    )
    connection.commit()
    connection.close()

    for _ in range(2):  # opening again finds the column and leaves it alone
        backend = make_backend(path=str(path))
        await backend.open()
        try:
            old = await row_of(backend, "old")
            assert old is not None
            assert old.depends_on == ()
        finally:
            await backend.close()

    backend = make_backend(path=str(path))
    await backend.open()
    try:
        await backend.enqueue([flow_job("a"), flow_job("b", "a")])
        await take(backend, "old")
        lease = await take(backend, "a")
        await backend.settle([done(lease)], now=T0)
        assert (await row_of(backend, "b")).state == "pending"  # type: ignore[union-attr]
    finally:
        await backend.close()
    columns = [
        row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(blamequeue_jobs)")
    ]
    assert columns.count("depends_on") == 1


# The release trigger of the versions before dependency policies, as they created it.
_FIRST_FLOW_RELEASE = """
    CREATE TRIGGER "blamequeue_jobs_flow_release"
    AFTER UPDATE OF state ON "blamequeue_jobs" FOR EACH ROW
    WHEN NEW.state = 'done' AND OLD.state <> 'done' AND NEW.flow_id IS NOT NULL
    BEGIN
        UPDATE "blamequeue_jobs" SET state = 'pending', available_at = NEW.finished_at
        WHERE flow_id = NEW.flow_id AND state = 'parked'
          AND EXISTS (SELECT 1 FROM json_each("blamequeue_jobs".depends_on) AS w
                      WHERE w.value = NEW.id)
          AND NOT EXISTS (SELECT 1 FROM json_each("blamequeue_jobs".depends_on) AS d
                          JOIN "blamequeue_jobs" AS p ON p.id = d.value
                          WHERE p.state <> 'done');
    END"""


async def test_a_table_from_before_dependency_policies_gets_their_column_and_triggers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path)
    connection.execute(Statements("blamequeue_jobs", None).schema[0])
    connection.execute('ALTER TABLE "blamequeue_jobs" DROP COLUMN flow_rule')
    connection.execute(_FIRST_FLOW_RELEASE)
    connection.commit()
    connection.close()

    backend = make_backend(path=str(path))
    await backend.open()
    try:
        await backend.enqueue(
            [
                attrs.evolve(
                    flow_job("a"), max_attempts=1, dependants_error="dependency failed: a"
                ),
                attrs.evolve(flow_job("b", "a"), on_dependency_failure="fail"),
                attrs.evolve(flow_job("c", "a"), on_dependency_failure="ignore"),
            ]
        )
        lease = await take(backend, "a")
        dead = Settlement(job_id="a", token=lease.token, outcome="dead", at=T0 + 5, error="x")
        assert await backend.settle([dead], now=T0 + 5) == [True]
        b, c = await row_of(backend, "b"), await row_of(backend, "c")
        assert b is not None
        assert (b.state, b.last_error, b.finished_at) == (
            "dead",
            "dependency failed: a",
            T0 + 5,
        )
        assert c is not None
        assert (c.state, c.available_at) == ("pending", T0 + 5)
    finally:
        await backend.close()
    triggers = {
        row[0]
        for row in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        )
    }
    assert "blamequeue_jobs_flow_release" not in triggers
    assert {"blamequeue_jobs_flow_done", "blamequeue_jobs_flow_fall"} <= triggers


async def release_round(backend: LocalBackend, *, keep: bool) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    lease = await take(backend, "a")
    settled = Settlement(job_id="a", token=lease.token, outcome="done", at=T0, keep=keep)
    assert await backend.settle([settled], now=T0) == [True]
    assert await take(backend, "b")


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "deleted"])
@pytest.mark.parametrize(
    "options",
    [{"table": "app_jobs"}, {"table": "app_jobs", "schema": "main"}, {"schema": "temp"}],
    ids=["custom-table", "schema-main", "schema-temp"],
)
async def test_release_works_in_any_table_and_schema(
    tmp_path: Path, options: dict[str, str], keep: bool
) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"), **options)
    await backend.open()
    try:
        await release_round(backend, keep=keep)
    finally:
        await backend.close()


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "deleted"])
async def test_release_in_an_attached_schema_touches_only_its_own_table(
    tmp_path: Path, keep: bool
) -> None:
    connection = connect(tmp_path / "main.db")
    connection.execute("ATTACH DATABASE ? AS side", (str(tmp_path / "side.db"),))
    in_main = make_backend(store=connection)
    in_side = make_backend(store=connection, schema="side")  # the same table name
    await in_main.open()
    await in_side.open()
    try:
        await in_main.enqueue([flow_job("a"), flow_job("b", "a")])
        await release_round(in_side, keep=keep)
        assert (await row_of(in_main, "b")).state == "parked"  # type: ignore[union-attr]
    finally:
        await in_side.close()
        await in_main.close()
        connection.close()


async def test_a_delete_interrupted_after_the_release_is_finished_by_a_retry(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    lease = await take(backend, "a")
    store = backend.store
    assert store is not None
    # What a crash between the two statements of a deleting settle leaves behind.
    await store.execute_all(
        backend._sql.settle_done_flow_jobs, (f'[["a", "{lease.token}", {T0 + 2}]]',)
    )
    assert (await row_of(backend, "a")).state == "done"  # type: ignore[union-attr]
    assert (await row_of(backend, "b")).state == "pending"  # type: ignore[union-attr]
    settled = Settlement(job_id="a", token=lease.token, outcome="done", at=T0 + 2, keep=False)
    assert await backend.settle([settled], now=T0 + 2) == [True]
    assert await row_of(backend, "a") is None


async def test_a_deleting_settle_of_a_job_outside_flows_takes_no_flow_path(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([new_job(id="plain")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    settled = Settlement(job_id="plain", token=lease.token, outcome="done", at=T0, keep=False)
    assert await backend.settle([settled], now=T0) == [True]
    assert await row_of(backend, "plain") is None
    assert await backend.settle([settled], now=T0) == [False]
