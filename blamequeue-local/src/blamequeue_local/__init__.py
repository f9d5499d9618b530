"""blamequeue's ``local`` backend: jobs in a SQLite table, no server needed.

It is the default backend of ``pip install blamequeue``::

    Queue(backends={"primary": {"protocol": "local"}})                 # ./blamequeue.db
    Queue(backends={"app": {"protocol": "local", "path": "app.db",
                            "table": "app_jobs", "durability": "full"}})

The default store runs stdlib ``sqlite3`` on an anyio worker thread, so it works on asyncio
and trio.  Several worker processes may share one database file: leasing is one atomic
statement, and idle consumers notice other processes' commits within ~20 ms.

**Bring your own store** (option ``store``): a ``sqlite3.Connection``, an
``aiosqlite.Connection`` (asyncio only), or any object satisfying :class:`Store`.  The backend
never commits a transaction it did not open and never closes a store it was handed.

**Transactional enqueue.**  Enqueue through a backend whose store is your own connection,
inside your own transaction: the job lands with your rows on ``COMMIT`` and vanishes with
them on ``ROLLBACK``.  :func:`connect` opens a connection set up for this (autocommit, so
``BEGIN`` / ``COMMIT`` are yours; usable from the backend's worker thread; WAL)::

    import blamequeue_local

    conn = blamequeue_local.connect("app.db")
    queue = Queue(backends={
        "outbox": {"protocol": "local", "store": conn},    # enqueue in your transactions
        "worker": {"protocol": "local", "path": "app.db"},  # consume on its own connection
    }, default_backend="worker")
    async with queue:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO orders (id) VALUES (?)", (order_id,))
        await queue.enqueue("emails", {"order": order_id}, backend="outbox")
        conn.execute("COMMIT")         # or ROLLBACK: the job goes with the order

Consume through a backend with its own connection (``"worker"`` above, same file and table):
every statement run on a shared connection while your transaction is open joins it.
"""

from __future__ import annotations

from blamequeue_local._aiosqlite_store import AiosqliteStore
from blamequeue_local._backend import LocalBackend
from blamequeue_local._store import SQLiteStore, Store, connect

__all__ = ["AiosqliteStore", "LocalBackend", "SQLiteStore", "Store", "connect"]
