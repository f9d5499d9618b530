"""The ``local`` backend's options: parsed and checked at construction, without any I/O."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from typing import Any, Final, cast

import attrs

from blamequeue.abc import MAX_SECONDS, OptionReader
from blamequeue_local._aiosqlite_store import is_aiosqlite_connection
from blamequeue_local._store import Durability, Store

__all__ = ["DEFAULT_PATH", "DEFAULT_TABLE", "LocalOptions", "parse_options"]

DEFAULT_PATH: Final = "./blamequeue.db"
DEFAULT_TABLE: Final = "blamequeue_jobs"
DEFAULT_BUSY_TIMEOUT: Final = 5.0

# Identifiers are the only text ever spliced into SQL, so they must be plain names: this
# pattern leaves nothing that quoting could get wrong.
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_KNOWN: Final = ("path", "table", "schema", "store", "durability", "busy_timeout")


@attrs.frozen(kw_only=True)
class LocalOptions:
    path: str | None
    """The database file of the default store; ``None`` with a bring-your-own store."""
    table: str
    schema: str | None
    store: object | None
    durability: Durability
    busy_timeout: float


def _identifier(read: OptionReader, option: str, value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise read.invalid(
            f"option {option!r} must be a plain SQL identifier (a letter or '_', then up to "
            f"62 letters, digits or '_'), got {value!r}"
        )
    return value


def _check_store(read: OptionReader, store: object) -> None:
    if isinstance(store, sqlite3.Connection) or is_aiosqlite_connection(store):
        return
    if not isinstance(store, Store):
        raise read.invalid(
            f"option 'store' must be a sqlite3.Connection, an aiosqlite.Connection or an object "
            f"with async execute / execute_one / execute_all methods (see "
            f"blamequeue_local.Store), got {type(store).__name__}"
        )


def parse_options(options: Mapping[str, Any]) -> LocalOptions:
    """Check ``options`` and return them typed; raise ``queue/invalid-config`` naming the fault."""
    read = OptionReader(options, backend="local backend", known=_KNOWN)
    store = read.raw("store")
    path: str | None = None
    if store is not None:
        _check_store(read, store)
        read.refuse_with(
            "store",
            ("path", "durability", "busy_timeout"),
            "the store you pass is already opened and configured by you (set PRAGMAs on your "
            "own connection, or drop 'store' to let the backend open the database)",
        )
    else:
        path = read.path("path", DEFAULT_PATH)

    table = _identifier(read, "table", options.get("table", DEFAULT_TABLE))
    if table.lower().startswith("sqlite_"):
        raise read.invalid(
            f"option 'table' may not start with 'sqlite_' (SQLite reserves those names), "
            f"got {table!r}"
        )

    schema = read.raw("schema")
    if schema is not None:
        schema = _identifier(read, "schema", schema)
        if store is None and schema.lower() not in ("main", "temp"):
            raise read.invalid(
                f"option 'schema' is {schema!r}, but the default store has only 'main' and "
                f"'temp'; to use an attached database, pass 'store' (a connection on which you "
                f"ran ATTACH DATABASE ... AS {schema})"
            )

    durability = {"normal": "WAL + synchronous=NORMAL", "full": "fsync per commit"}
    return LocalOptions(
        path=path,
        table=table,
        schema=schema,
        store=store,
        durability=cast(Durability, read.choice("durability", "normal", durability)),
        busy_timeout=read.seconds("busy_timeout", DEFAULT_BUSY_TIMEOUT, high=MAX_SECONDS),
    )
