"""Shared builders for the local backend tests (not a test module)."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext, NewJob, StoredJob
from blamequeue_local import LocalBackend
from blamequeue_local._backend import stored_job
from blamequeue_local._statements import COLUMNS

T0 = 1_000.0
EXPIRED = "lease expired"

_ids = itertools.count(1)


def make_backend(name: str = "t", **options: Any) -> LocalBackend:
    return LocalBackend(options, BackendContext(name=name, clock=SystemClock()))


def new_job(
    queue: str = "q",
    *,
    id: str | None = None,
    priority: int = 0,
    available_at: float = T0,
    max_attempts: int = 5,
    payload: str = '{"n": 1}',
    parked: bool = False,
) -> NewJob:
    return NewJob(
        id=id or f"job-{next(_ids):08d}",
        queue=queue,
        payload=payload,
        priority=priority,
        max_attempts=max_attempts,
        created_at=T0,
        available_at=available_at,
        classification="internal",
        trace_id="trace-1",
        meta="meta",
        parked=parked,
    )


async def leased_ids(
    backend: LocalBackend, queue: str = "q", *, limit: int = 100, now: float = T0
) -> list[str]:
    leases = await backend.lease(queue, limit=limit, now=now, lease_seconds=30.0)
    return [lease.job.id for lease in leases]


async def row_of(
    backend: LocalBackend, job_id: str, table: str = "blamequeue_jobs"
) -> StoredJob | None:
    store = backend.store
    assert store is not None
    row = await store.execute_one(f'SELECT {COLUMNS} FROM "{table}" WHERE id = ?', (job_id,))
    return None if row is None else stored_job(row)


def names_in(path: Path, schema: str = "main") -> set[str]:
    """The names of the tables, indexes and triggers in ``schema`` of the database at ``path``."""
    reader = sqlite3.connect(path)
    try:
        rows = reader.execute(f'SELECT name FROM "{schema}".sqlite_master').fetchall()
    finally:
        reader.close()
    return {name for (name,) in rows}
