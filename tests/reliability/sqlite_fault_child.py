"""Child processes of the SQLite fault scenarios (run as a script, not collected by pytest).

usage:
  sqlite_fault_child.py lock DB
      BEGIN EXCLUSIVE on DB, print "locked", hold the lock until a line arrives on stdin.
  sqlite_fault_child.py fsize DB HEADROOM
      Enqueue batches on DB under RLIMIT_FSIZE = (size of DB and its WAL) + HEADROOM bytes until
      the backend refuses, lift the limit, enqueue once more; print one JSON object.
  sqlite_fault_child.py batches DB PROGRESS FIRST SIZE HOW
      Enqueue batches of SIZE jobs ({"batch": b, "i": i}, plain JSON at rest) numbered from
      FIRST, for ever; before each, append "start <b> <time>" to PROGRESS, after it
      "acked <b> <time>" (one write(2) each: a SIGKILL cannot lose a line that was written).
      HOW is "plain" (the default store on DB) or "paused" (PausingStore below, which also
      writes "inside <b> <time>").
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import anyio

from blamequeue import Queue
from blamequeue.errors import QueueError
from blamequeue_local import SQLiteStore, connect

QUEUE = "faults"


def lock(db: str) -> None:
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    connection.execute("COMMIT")
    connection.close()


def bytes_used(db: str) -> int:
    return sum(os.path.getsize(db + suffix) for suffix in ("", "-wal"))


async def fsize(db: str, headroom: int) -> None:
    report: dict[str, Any] = {"acked": [], "error": None}
    payload = {"pad": "x" * 500}
    async with Queue(backends={"local": {"protocol": "local", "path": db}}, sweep_interval=0) as q:
        report["acked"] += await q.enqueue_many(QUEUE, [payload] * 100)
        used = bytes_used(db)
        # Past the limit the kernel sends SIGXFSZ (which would kill us) and fails the write
        # with EFBIG; SQLite sees the failed write.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (used + headroom, hard))
        for _ in range(1000):
            try:
                report["acked"] += await q.enqueue_many(QUEUE, [payload] * 100)
            except QueueError as exc:
                report["error"] = {
                    "code": exc.code,
                    "retryable": exc.retryable,
                    "message": exc.message,
                }
                break
        report["size_while_full"] = await q.size(QUEUE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        report["acked"] += await q.enqueue_many(QUEUE, [payload] * 100)
        report["size_after"] = await q.size(QUEUE)
    print(json.dumps(report), flush=True)


class PausingStore:
    """A bring-your-own store that runs each INSERT inside a transaction it opens and then
    holds open for ``pause`` seconds before committing (an application enqueueing inside its
    own slow transaction).  It notes "inside <batch>" once the rows are written and not yet
    committed: a kill after that line is a kill inside the open write transaction."""

    def __init__(self, connection: sqlite3.Connection, progress: TextIO, pause: float) -> None:
        self.connection = connection
        self.inner = SQLiteStore(connection)
        self.progress = progress
        self.pause = pause
        self.batch = -1

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        if not sql.lstrip().upper().startswith("INSERT"):
            return await self.inner.execute(sql, params)
        # BEGIN and COMMIT on the connection itself, as an application does (SQLiteStore commits
        # a transaction that one of its own statements opened).
        self.connection.execute("BEGIN IMMEDIATE")
        count = await self.inner.execute(sql, params)
        self.progress.write(f"inside {self.batch} {time.time()}\n")
        await anyio.sleep(self.pause)
        self.connection.execute("COMMIT")
        return count

    async def execute_one(self, sql: str, params: Sequence[Any]) -> Any:
        return await self.inner.execute_one(sql, params)

    async def execute_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self.inner.execute_all(sql, params)


async def batches(db: str, progress: TextIO, first: int, size: int, how: str) -> None:
    store: PausingStore | None = None
    if how == "paused":
        connection = connect(db)
        # A small page cache: a big batch spills uncommitted pages into the WAL before COMMIT,
        # so the kill leaves a half-written transaction on disk for recovery to discard.
        connection.execute("PRAGMA cache_size = 100")
        store = PausingStore(connection, progress, pause=0.5)
        config: dict[str, Any] = {"protocol": "local", "store": store, "seal": False}
    else:
        config = {"protocol": "local", "path": db, "seal": False}
    async with Queue(backends={"local": config}, sweep_interval=0) as q:
        number = first
        while True:
            if store is not None:
                store.batch = number
            progress.write(f"start {number} {time.time()}\n")
            await q.enqueue_many(QUEUE, [{"batch": number, "i": i} for i in range(size)])
            progress.write(f"acked {number} {time.time()}\n")
            number += 1


def main() -> None:
    mode, db, *rest = sys.argv[1:]
    if mode == "lock":
        lock(db)
    elif mode == "fsize":
        anyio.run(fsize, db, int(rest[0]))
    elif mode == "batches":
        # Never closed: the process ends by SIGKILL.
        progress = open(rest[0], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        anyio.run(batches, db, progress, int(rest[1]), int(rest[2]), rest[3])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
