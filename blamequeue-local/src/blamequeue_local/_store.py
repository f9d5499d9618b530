"""Where the ``local`` backend's SQL runs: the :class:`Store` protocol and the sqlite3 adapter.

A store executes one SQLite statement at a time with ``?`` placeholders.  The backend builds
its default store from ``sqlite3`` (:func:`connect` + :class:`SQLiteStore`); an application may
hand it any object that satisfies :class:`Store` instead (option ``store``), or a plain
``sqlite3.Connection`` / ``aiosqlite.Connection``, which the backend wraps in
:class:`SQLiteStore` / :class:`~blamequeue_local.AiosqliteStore` itself.
"""

from __future__ import annotations

import abc
import os
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import anyio
import anyio.to_thread

__all__ = ["Row", "SQLiteStore", "StatementStore", "Store", "connect"]

Row: TypeAlias = Sequence[Any] | sqlite3.Row
"""One result row; the backend reads it by position only, so tuples and ``sqlite3.Row`` both do."""

Durability = Literal["normal", "full"]


@runtime_checkable
class Store(Protocol):
    """What the ``local`` backend needs from a bring-your-own store.

    Each method runs exactly one SQLite statement (``sql``, with ``?`` and ``?NNN``
    placeholders bound by position from ``params``); the backend never sends ``BEGIN`` /
    ``COMMIT`` and relies on each statement being atomic on its own.  A store may run the
    statement inside a transaction its owner has open (that is how transactional enqueue
    works); outside one it must commit the statement before returning, or other processes
    will wait on its write lock.

    Errors: raise the ``sqlite3`` exception you got (the backend maps busy, full, read-only and
    corrupt databases to :class:`~blamequeue.errors.BackendUnavailableError`), an ``OSError``
    for a temporary failure, or a :class:`~blamequeue.errors.QueueError`.

    The backend never closes a store it was handed.
    """

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        """Run a statement that returns no rows; return how many rows it changed."""
        ...

    async def execute_one(self, sql: str, params: Sequence[Any]) -> Row | None:
        """Run a statement; return its first row, or ``None`` when it returned none."""
        ...

    async def execute_all(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Run a statement (``SELECT`` or ``... RETURNING``); return every row."""
        ...


Fetch = Literal["count", "one", "all"]


def run_statement(
    connection: sqlite3.Connection, sql: str, params: Sequence[Any], fetch: Fetch
) -> Any:
    """Run one statement on ``connection`` (blocking) and fetch what ``fetch`` asks for.

    The statement joins a transaction already open on the connection and leaves it to its
    owner.  When the statement itself opened one (sqlite3's implicit ``BEGIN`` before DML in
    its default isolation mode) it is committed here, so a shared connection outside a
    transaction behaves like autocommit instead of holding the write lock indefinitely.
    """
    opened_here = not connection.in_transaction
    try:
        result = fetch_rows(connection, sql, params, fetch)
    except BaseException:
        if opened_here and connection.in_transaction:
            connection.rollback()
        raise
    if opened_here and connection.in_transaction:
        connection.commit()
    return result


def fetch_rows(
    connection: sqlite3.Connection, sql: str, params: Sequence[Any], fetch: Fetch
) -> Any:
    """Run one statement on ``connection`` (blocking) and fetch what ``fetch`` asks for,
    leaving any transaction as it is."""
    cursor = connection.execute(sql, params)
    try:
        if fetch == "count":
            return cursor.rowcount
        # Exhaust the cursor even for "one": a DML ... RETURNING statement only completes
        # (and commits in autocommit mode) once every row was stepped.
        rows = cursor.fetchall()
        return rows if fetch == "all" else (rows[0] if rows else None)
    finally:
        cursor.close()


class StatementStore(abc.ABC):
    """The three :class:`Store` methods over one ``_run(sql, params, fetch)``, which runs a
    statement and fetches the row count, the first row or every row."""

    @abc.abstractmethod
    async def _run(self, sql: str, params: Sequence[Any], fetch: Fetch) -> Any: ...

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        count: int = await self._run(sql, params, "count")
        return count

    async def execute_one(self, sql: str, params: Sequence[Any]) -> Row | None:
        row: Row | None = await self._run(sql, params, "one")
        return row

    async def execute_all(self, sql: str, params: Sequence[Any]) -> list[Row]:
        rows: list[Row] = await self._run(sql, params, "all")
        return rows


class SQLiteStore(StatementStore):
    """A :class:`Store` over a stdlib ``sqlite3.Connection``, usable from asyncio and trio.

    Statements run one at a time on an anyio worker thread (a capacity limiter of one keeps
    them serialised, since a sqlite3 connection is not safe to use from two threads at once).
    The connection must have been opened with ``check_same_thread=False``; :func:`connect`
    does that.  Closing the connection is its owner's business.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        # Created on first use so it belongs to the event loop that runs the statements.
        self._limiter: anyio.CapacityLimiter | None = None

    def _thread_limiter(self) -> anyio.CapacityLimiter:
        """The limiter of one that serialises the connection's worker-thread calls."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return self._limiter

    async def _run(self, sql: str, params: Sequence[Any], fetch: Fetch) -> Any:
        return await anyio.to_thread.run_sync(
            run_statement, self.connection, sql, params, fetch, limiter=self._thread_limiter()
        )

    async def aclose(self) -> None:
        """Close the connection, after any statement still running.  For its owner only: the
        backend calls it for the connection it opened itself, never for one it was handed."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.connection.close, limiter=self._thread_limiter())


def connect(
    path: str | os.PathLike[str],
    *,
    durability: Durability = "normal",
    busy_timeout: float = 5.0,
) -> sqlite3.Connection:
    """Open a ``sqlite3.Connection`` set up the way the ``local`` backend uses SQLite.

    Autocommit (``isolation_level=None``: you write ``BEGIN`` / ``COMMIT`` yourself),
    ``check_same_thread=False`` (the backend runs statements on a worker thread), WAL journal,
    ``synchronous=NORMAL`` (``durability="normal"``) or ``FULL`` (``"full"``), and a busy
    timeout in seconds.  Blocking: call it at start-up, or through a worker thread.

    The backend's default store is built with it; pass the result as ``store`` to enqueue
    inside your own transactions (see the package docstring).

    A database file that does not exist yet is created with mode 0600 whatever the umask, and
    SQLite gives its ``-wal`` and ``-shm`` files the database file's mode: jobs are readable by
    their owner only.  An existing file keeps the mode its owner gave it.
    """
    _create_owner_only(os.fspath(path))
    connection = sqlite3.connect(
        os.fspath(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute("PRAGMA journal_mode=WAL").fetchall()
        connection.execute(
            "PRAGMA synchronous=FULL" if durability == "full" else "PRAGMA synchronous=NORMAL"
        )
    except BaseException:
        connection.close()
        raise
    return connection


def _create_owner_only(path: str) -> None:
    """Create the empty database file ``path`` with mode 0600 unless it exists already.

    SQLite would create it with 0644 less the umask, and its ``-wal`` / ``-shm`` files copy the
    database file's mode, so creating the file first (an empty file is an empty database) sets
    all three.  Any failure is left for ``sqlite3.connect`` to report as it always does (a
    missing directory, a read-only filesystem): its errors are the ones the backend maps.
    """
    if path in ("", ":memory:"):  # no file at all
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # it exists (keep its mode), or sqlite3 reports why it cannot be created
        return
    try:
        if hasattr(os, "fchmod"):  # os.open's mode is cut by the umask, never widened
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
