"""Group commit for the ``local`` backend's own connection: statements that callers send while
one is running go to SQLite together, in one transaction, one thread hop and one commit.

Each statement keeps its meaning on its own.  SQLite makes every statement atomic inside a
transaction: one that fails (a job id that exists, text SQLite cannot store) is backed out
alone and the statements before it stay, so it raises for its caller only while the others
commit.  None of the backend's statements asks for another conflict resolution (``OR FAIL``,
``OR ROLLBACK``) or raises in a trigger.  A caller's statement returns only once the
transaction holding it committed, so a statement that returned is as durable as one committed
alone.  A failure of the transaction itself (``BEGIN IMMEDIATE`` finding the file busy past
``busy_timeout``, a full disk, an I/O error after which SQLite rolled it all back) stores
nothing of the group and raises for each caller.

Only for a connection the backend opened itself: on a connection handed to it, its owner may
have a transaction open (transactional enqueue), which other callers' statements must not join.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import anyio
import anyio.lowlevel
import anyio.to_thread

from blamequeue_local._store import Fetch, SQLiteStore, fetch_rows, run_statement

__all__ = ["GroupCommitStore", "run_group"]

# Statements one transaction takes at most; callers beyond it wait for the next one.
GROUP_MAX: Final = 256


class _Statement:
    """One caller's statement, and its outcome once its transaction ended: ``(True, result)``
    or ``(False, exception)``."""

    __slots__ = ("fetch", "outcome", "params", "sql")

    def __init__(self, sql: str, params: Sequence[Any], fetch: Fetch) -> None:
        self.sql = sql
        self.params = params
        self.fetch = fetch
        self.outcome: tuple[bool, Any] | None = None


def run_group(
    connection: sqlite3.Connection, statements: Sequence[tuple[str, Sequence[Any], Fetch]]
) -> list[tuple[bool, Any]]:
    """Run ``statements`` (blocking) in one transaction; return ``(True, result)`` or
    ``(False, exception)`` for each, in order.

    One statement alone runs as :func:`run_statement` runs it (its own implicit transaction).
    An exception raised here (``BEGIN``, ``COMMIT``, or an error that ended the transaction)
    means nothing of the group was stored.
    """
    if len(statements) == 1:
        sql, params, fetch = statements[0]
        try:
            return [(True, run_statement(connection, sql, params, fetch))]
        except Exception as exc:
            return [(False, exc)]
    outcomes: list[tuple[bool, Any]] = []
    # IMMEDIATE: the write lock is taken (or waited for) once, here; a deferred transaction
    # that read first could not upgrade after another process's commit.
    connection.execute("BEGIN IMMEDIATE")
    try:
        for sql, params, fetch in statements:
            try:
                outcomes.append((True, fetch_rows(connection, sql, params, fetch)))
            except Exception as exc:
                if not connection.in_transaction:
                    raise  # SQLite rolled the whole transaction back (e.g. a full disk)
                outcomes.append((False, exc))  # backed out alone (statement atomicity)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.rollback()
        raise
    return outcomes


class GroupCommitStore(SQLiteStore):
    """A :class:`SQLiteStore` whose statements sent while one is running wait for it, then go
    to the worker thread together (:func:`run_group`).

    A statement sent to an idle store runs at once, alone, as in :class:`SQLiteStore`.  A
    caller cancelled while its statement still waits takes it back (nothing of it runs); once
    its group started, the group finishes (the thread is not interrupted) and the caller's
    cancellation is delivered after it, as with one statement on :class:`SQLiteStore`.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__(connection)
        self._waiting: list[_Statement] = []
        self._running = False
        # Set (and replaced) when the running group ended: the waiters look again.
        self._ended: anyio.Event | None = None

    async def _run(self, sql: str, params: Sequence[Any], fetch: Fetch) -> Any:
        statement = _Statement(sql, params, fetch)
        self._waiting.append(statement)
        try:
            while statement.outcome is None:
                if self._running:
                    if self._ended is None:
                        self._ended = anyio.Event()
                    await self._ended.wait()
                else:
                    await self._run_group()
        except BaseException:
            if statement.outcome is None and statement in self._waiting:
                self._waiting.remove(statement)  # not sent: nothing of it runs
            raise
        ok, value = statement.outcome
        if not ok:
            raise value
        return value

    async def _run_group(self) -> None:
        """Send the waiting statements (up to :data:`GROUP_MAX`) and hand out their outcomes."""
        group, self._waiting = self._waiting[:GROUP_MAX], self._waiting[GROUP_MAX:]
        self._running = True
        try:
            # Shielded: once sent, the outcomes reach every caller, whoever is cancelled.
            with anyio.CancelScope(shield=True):
                outcomes = await anyio.to_thread.run_sync(
                    run_group,
                    self.connection,
                    [(item.sql, item.params, item.fetch) for item in group],
                    limiter=self._thread_limiter(),
                )
        except BaseException as exc:  # nothing of the group was stored: each caller raises it
            outcomes = [(False, exc)] * len(group)
            if not isinstance(exc, Exception):
                raise
        finally:
            for item, outcome in zip(group, outcomes, strict=True):
                item.outcome = outcome
            self._running = False
            ended, self._ended = self._ended, None
            if ended is not None:
                ended.set()
        await anyio.lowlevel.checkpoint_if_cancelled()  # this caller's, after the hand-out
