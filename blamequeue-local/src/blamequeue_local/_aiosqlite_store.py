"""The :class:`~blamequeue_local.Store` adapter for an ``aiosqlite.Connection`` (asyncio only).

aiosqlite drives its connection from asyncio futures, so this adapter cannot run on trio;
it says so with a clear error instead of hanging.  ``aiosqlite`` itself is not imported here:
the adapter only calls the connection it was given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import anyio

from blamequeue.errors import ConfigError
from blamequeue_local._store import Fetch, StatementStore

__all__ = ["AiosqliteStore", "is_aiosqlite_connection"]


def is_aiosqlite_connection(obj: object) -> bool:
    """Whether ``obj`` is an ``aiosqlite.Connection`` (without importing aiosqlite)."""
    return any(
        cls.__name__ == "Connection" and cls.__module__.startswith("aiosqlite")
        for cls in type(obj).__mro__
    )


def _require_asyncio() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigError(
            "queue/invalid-config",
            "an aiosqlite connection given as the local backend's store works only on asyncio; "
            "on trio pass a sqlite3.Connection (blamequeue_local.connect(path)) or omit "
            "'store' to use the default store",
        ) from None


class AiosqliteStore(StatementStore):
    """A :class:`~blamequeue_local.Store` over an ``aiosqlite.Connection`` (asyncio only).

    Statements join a transaction already open on the connection (transactional enqueue);
    one that opened a transaction itself (aiosqlite's default isolation mode begins one before
    DML) is committed at once.  The connection stays open: it belongs to whoever made it.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def _run(self, sql: str, params: Sequence[Any], fetch: Fetch) -> Any:
        _require_asyncio()
        connection = self.connection
        opened_here = not connection.in_transaction
        try:
            async with connection.execute(sql, params) as cursor:
                if fetch == "count":
                    result: Any = cursor.rowcount
                else:
                    # Exhaust the cursor: DML ... RETURNING completes only after the last row.
                    rows = list(await cursor.fetchall())
                    result = rows if fetch == "all" else (rows[0] if rows else None)
        except BaseException:
            if opened_here and connection.in_transaction:
                # Shielded: a cancelled caller must not leave our own transaction open.
                with anyio.CancelScope(shield=True):
                    await connection.rollback()
            raise
        if opened_here and connection.in_transaction:
            with anyio.CancelScope(shield=True):
                await connection.commit()
        return result
