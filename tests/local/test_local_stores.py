"""Where the jobs live: custom tables and schemas, bring-your-own stores, transactional enqueue."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from local_helpers import T0, leased_ids, make_backend, new_job

from blamequeue.abc import Settlement
from blamequeue.errors import ConfigError
from blamequeue_local import AiosqliteStore, LocalBackend, SQLiteStore, Store, connect

pytestmark = pytest.mark.anyio


def tables_in(path: Path) -> set[str]:
    with sqlite3.connect(path) as reader:
        rows = reader.execute("SELECT name FROM sqlite_master").fetchall()
    reader.close()
    return {name for (name,) in rows}


def count_jobs(path: Path, table: str = "blamequeue_jobs") -> int:
    reader = sqlite3.connect(path)
    try:
        (count,) = reader.execute(f'SELECT count(*) FROM "{table}"').fetchone()
    finally:
        reader.close()
    return int(count)


@pytest.fixture
def app_db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = connect(tmp_path / "app.db")
    connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    yield connection
    connection.close()


@pytest.fixture
async def outbox(app_db: sqlite3.Connection) -> AsyncIterator[LocalBackend]:
    backend = make_backend("outbox", store=app_db)
    await backend.open()
    yield backend
    await backend.close()


async def roundtrip(backend: LocalBackend) -> None:
    """Enqueue, lease and settle one job through ``backend``."""
    await backend.enqueue([new_job(id="rt-1"), new_job(id="rt-2", priority=1)])
    leases = await backend.lease("q", limit=5, now=T0, lease_seconds=30.0)
    assert [lease.job.id for lease in leases] == ["rt-2", "rt-1"]
    settled = await backend.settle(
        [
            Settlement(job_id=le.job.id, token=le.token, outcome="done", at=T0, keep=False)
            for le in leases
        ],
        now=T0,
    )
    assert settled == [True, True]
    assert await backend.size("q") == 0


# -- custom table and schema ------------------------------------------------------------------
async def test_custom_table_in_schema_main(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path), table="app_jobs", schema="main")
    await backend.open()
    try:
        await roundtrip(backend)
    finally:
        await backend.close()
    assert {"app_jobs", "app_jobs_lease_order_idx", "app_jobs_dlq_idx"} <= tables_in(path)
    assert "blamequeue_jobs" not in tables_in(path)


async def test_temp_schema_keeps_jobs_private_to_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = make_backend(path=str(path), schema="temp")
    await backend.open()
    try:
        await roundtrip(backend)
    finally:
        await backend.close()
    assert "blamequeue_jobs" not in tables_in(path)


async def test_table_in_an_attached_database(tmp_path: Path) -> None:
    connection = connect(tmp_path / "main.db")
    connection.execute("ATTACH DATABASE ? AS side", (str(tmp_path / "side.db"),))
    backend = make_backend(store=connection, schema="side", table="side_jobs")
    await backend.open()
    try:
        await backend.enqueue([new_job(id="in-side")])
        assert count_jobs(tmp_path / "side.db", "side_jobs") == 1
        assert "side_jobs" not in tables_in(tmp_path / "main.db")
        assert await leased_ids(backend) == ["in-side"]
    finally:
        await backend.close()
        connection.close()


async def test_an_unattached_schema_is_a_config_error(app_db: sqlite3.Connection) -> None:
    backend = make_backend(store=app_db, schema="nowhere")
    with pytest.raises(ConfigError) as info:
        await backend.open()
    assert "ATTACH" in info.value.message


# -- bring-your-own sqlite3 connection --------------------------------------------------------
async def test_transactional_enqueue_lands_with_the_commit(
    app_db: sqlite3.Connection, outbox: LocalBackend, tmp_path: Path
) -> None:
    app_db.execute("BEGIN IMMEDIATE")
    app_db.execute("INSERT INTO orders (id) VALUES (1)")
    await outbox.enqueue([new_job(id="with-order")])
    assert count_jobs(tmp_path / "app.db") == 0  # not visible to others before the commit
    app_db.execute("COMMIT")
    assert count_jobs(tmp_path / "app.db") == 1
    assert await leased_ids(outbox) == ["with-order"]


async def test_transactional_enqueue_vanishes_with_the_rollback(
    app_db: sqlite3.Connection, outbox: LocalBackend
) -> None:
    app_db.execute("BEGIN IMMEDIATE")
    app_db.execute("INSERT INTO orders (id) VALUES (1)")
    await outbox.enqueue([new_job(id="with-order")])
    app_db.execute("ROLLBACK")
    assert app_db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert await outbox.size("q") == 0


async def test_implicit_transaction_of_a_default_mode_connection_is_respected(
    tmp_path: Path,
) -> None:
    # sqlite3's default isolation mode opens a transaction before DML by itself.
    connection = sqlite3.connect(tmp_path / "legacy.db", check_same_thread=False)
    connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    backend = make_backend(store=connection)
    await backend.open()
    try:
        connection.execute("INSERT INTO orders (id) VALUES (1)")  # opens a transaction
        await backend.enqueue([new_job(id="in-tx")])
        connection.rollback()
        assert await backend.size("q") == 0
        # Outside a transaction, each statement is committed at once.
        await backend.enqueue([new_job(id="alone")])
        assert not connection.in_transaction
        assert count_jobs(tmp_path / "legacy.db") == 1
    finally:
        await backend.close()
        connection.close()


async def test_the_backend_never_closes_a_connection_it_was_handed(
    app_db: sqlite3.Connection,
) -> None:
    backend = make_backend(store=app_db)
    await backend.open()
    await backend.close()
    assert app_db.execute("SELECT 1").fetchone() == (1,)


async def test_a_same_thread_connection_is_refused_with_advice(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "app.db")
    backend = make_backend(store=connection)
    try:
        with pytest.raises(ConfigError) as info:
            await backend.open()
        assert "check_same_thread=False" in info.value.message
    finally:
        connection.close()


def test_connect_sets_wal_and_durability(tmp_path: Path) -> None:
    connection = connect(tmp_path / "c.db", durability="full", busy_timeout=1.5)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA synchronous").fetchone() == (2,)
        assert connection.execute("PRAGMA busy_timeout").fetchone() == (1500,)
        assert connection.isolation_level is None
    finally:
        connection.close()


# -- any object with the Store methods --------------------------------------------------------
class RowStore:
    """A minimal custom store: returns sqlite3.Row rows, runs on the event loop thread."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        connection.row_factory = sqlite3.Row
        self.connection = connection
        self.statements = 0

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        self.statements += 1
        return self.connection.execute(sql, params).rowcount

    async def execute_one(self, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
        rows = await self.execute_all(sql, params)
        return rows[0] if rows else None

    async def execute_all(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        self.statements += 1
        return list(self.connection.execute(sql, params).fetchall())


async def test_a_custom_store_with_row_objects_works(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "custom.db", isolation_level=None)
    store = RowStore(connection)
    assert isinstance(store, Store)
    backend = make_backend(store=store)
    assert backend.store_path is None
    await backend.open()
    try:
        assert backend.store is store
        await roundtrip(backend)
        await backend.enqueue([new_job(id="dead", max_attempts=1)])
        [_lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=1.0)
        result = await backend.sweep(now=T0 + 1, retain_done=0.0, expired_error="gone")
        assert [job.id for job in result.dead] == ["dead"]
        before = await backend.dlq_retry("dead", now=T0 + 2)
        assert before is not None
        assert before.state == "dead"
    finally:
        await backend.close()
        connection.close()


async def test_each_operation_is_one_statement(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "count.db", isolation_level=None)
    store = RowStore(connection)
    backend = make_backend(store=store)
    await backend.open()
    try:
        before = store.statements
        await backend.enqueue([new_job() for _ in range(100)])
        leases = await backend.lease("q", limit=100, now=T0, lease_seconds=30.0)
        await backend.extend([(le.job.id, le.token) for le in leases], expires_at=T0 + 60)
        await backend.settle(
            [Settlement(job_id=le.job.id, token=le.token, outcome="done", at=T0) for le in leases],
            now=T0,
        )
        assert store.statements - before == 4
    finally:
        await backend.close()
        connection.close()


# -- aiosqlite --------------------------------------------------------------------------------
async def test_an_aiosqlite_connection_is_a_store_on_asyncio(
    tmp_path: Path, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip(
            "aiosqlite runs only on asyncio (its connection thread resolves asyncio futures)"
        )
    aiosqlite = pytest.importorskip("aiosqlite")
    async with aiosqlite.connect(tmp_path / "aio.db") as connection:
        backend = make_backend(store=connection)
        await backend.open()
        try:
            assert isinstance(backend.store, AiosqliteStore)
            await roundtrip(backend)
            # Its default mode opens a transaction before DML: ours is committed at once...
            await backend.enqueue([new_job(id="alone")])
            assert count_jobs(tmp_path / "aio.db") == 1
            # ...while one the application opened decides the job's fate.
            await connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
            await connection.execute("INSERT INTO orders (id) VALUES (1)")
            await backend.enqueue([new_job(id="in-tx")])
            await connection.rollback()
            assert await backend.size("q") == 1
        finally:
            await backend.close()
        assert (await (await connection.execute("SELECT 1")).fetchone())[0] == 1


def test_sqlite_connections_are_wrapped_in_sqlite_store(app_db: sqlite3.Connection) -> None:
    assert isinstance(SQLiteStore(app_db), Store)
