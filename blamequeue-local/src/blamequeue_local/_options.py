"""The ``local`` backend's options: parsed and checked at construction, without any I/O."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

import attrs

from blamequeue.abc import MAX_SECONDS
from blamequeue.errors import ConfigError
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


def _invalid(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", f"local backend: {message}")


def _identifier(option: str, value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise _invalid(
            f"option {option!r} must be a plain SQL identifier (a letter or '_', then up to "
            f"62 letters, digits or '_'), got {value!r}"
        )
    return value


def _check_store(store: object) -> None:
    if isinstance(store, sqlite3.Connection) or is_aiosqlite_connection(store):
        return
    if not isinstance(store, Store):
        raise _invalid(
            f"option 'store' must be a sqlite3.Connection, an aiosqlite.Connection or an object "
            f"with async execute / execute_one / execute_all methods (see "
            f"blamequeue_local.Store), got {type(store).__name__}"
        )


def parse_options(options: Mapping[str, Any]) -> LocalOptions:
    """Check ``options`` and return them typed; raise ``queue/invalid-config`` naming the fault."""
    unknown = sorted(str(key) for key in options if key not in _KNOWN)
    if unknown:
        raise _invalid(
            f"unknown option(s) {', '.join(map(repr, unknown))}; "
            f"the local backend accepts {', '.join(map(repr, _KNOWN))}"
        )

    store = options.get("store")
    if store is not None:
        _check_store(store)
        for option in ("path", "durability", "busy_timeout"):
            if options.get(option) is not None:
                raise _invalid(
                    f"option {option!r} cannot be combined with 'store': the store you pass "
                    f"is already opened and configured by you (set PRAGMAs on your own "
                    f"connection, or drop 'store' to let the backend open {option!r})"
                )

    path: str | None = None
    if store is None:
        raw_path = options.get("path", DEFAULT_PATH)
        if not isinstance(raw_path, str | os.PathLike) or isinstance(raw_path, bytes):
            raise _invalid(f"option 'path' must be a str or os.PathLike, got {raw_path!r}")
        path = os.fspath(raw_path)
        if not isinstance(path, str) or not path:
            raise _invalid("option 'path' must be a non-empty text path, like 'jobs.db'")

    table = _identifier("table", options.get("table", DEFAULT_TABLE))
    if table.lower().startswith("sqlite_"):
        raise _invalid(
            f"option 'table' may not start with 'sqlite_' (SQLite reserves those names), "
            f"got {table!r}"
        )

    schema = options.get("schema")
    if schema is not None:
        schema = _identifier("schema", schema)
        if store is None and schema.lower() not in ("main", "temp"):
            raise _invalid(
                f"option 'schema' is {schema!r}, but the default store has only 'main' and "
                f"'temp'; to use an attached database, pass 'store' (a connection on which you "
                f"ran ATTACH DATABASE ... AS {schema})"
            )

    durability = options.get("durability", "normal")
    if durability is None:
        durability = "normal"
    if durability not in ("normal", "full"):
        raise _invalid(
            f"option 'durability' must be 'normal' (WAL + synchronous=NORMAL) or 'full' "
            f"(fsync per commit), got {durability!r}"
        )

    busy_timeout = options.get("busy_timeout", DEFAULT_BUSY_TIMEOUT)
    if busy_timeout is None:
        busy_timeout = DEFAULT_BUSY_TIMEOUT
    if (
        isinstance(busy_timeout, bool)
        or not isinstance(busy_timeout, int | float)
        or not 0 <= busy_timeout <= MAX_SECONDS  # NaN fails, and so does a too large int
    ):
        raise _invalid(
            f"option 'busy_timeout' must be a number of seconds >= 0 and at most "
            f"{MAX_SECONDS:.0f}, got {busy_timeout!r}"
        )

    return LocalOptions(
        path=path,
        table=table,
        schema=schema,
        store=store,
        durability=durability,
        busy_timeout=float(busy_timeout),
    )
