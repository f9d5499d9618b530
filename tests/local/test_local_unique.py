"""Unique jobs on the local backend beyond the conformance suite: several processes racing on
one file, and a table made before unique jobs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from blamequeue import Queue
from unique_processes import enqueue_from_processes

pytestmark = pytest.mark.anyio

# A table as a release before unique jobs made it (no unique_key / unique_until columns).
_TABLE_BEFORE_UNIQUE = """
    CREATE TABLE "blamequeue_jobs" (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL,
        state TEXT NOT NULL, payload TEXT NOT NULL, priority INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL,
        created_at REAL NOT NULL, available_at REAL NOT NULL, classification TEXT,
        trace_id TEXT, last_error TEXT, meta TEXT, flow_id TEXT, finished_at REAL,
        lease_token TEXT, lease_expires_at REAL, depends_on TEXT
    )"""


def test_processes_racing_on_one_key_store_one_job_and_all_get_its_id(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    config = {"protocol": "local", "path": str(db)}
    ids = enqueue_from_processes(config, "race", "only-once", tmp_path, processes=3, each=20)
    assert len(ids) == 60
    assert len(set(ids)) == 1
    rows = sqlite3.connect(db).execute("SELECT id FROM blamequeue_jobs").fetchall()
    assert rows == [(ids[0],)]


async def test_a_table_from_before_unique_jobs_gets_the_columns_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as connection:
        connection.execute(_TABLE_BEFORE_UNIQUE)
    async with Queue(backends={"b": {"protocol": "local", "path": str(db)}}) as queue:
        first = await queue.enqueue("q", 1, unique_key="k")
        assert await queue.enqueue("q", 2, unique_key="k") == first
        assert await queue.size("q") == 1
