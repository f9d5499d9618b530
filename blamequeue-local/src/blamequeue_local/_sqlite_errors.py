"""Mapping of ``sqlite3`` (and store) exceptions to :class:`~blamequeue.errors.QueueError`.

The backend calls :func:`map_store_error` at its boundary, so no ``sqlite3`` exception ever
reaches the core.  A busy or locked database is temporary (retried, counted by the breaker);
a full disk, a read-only, unopenable or corrupt file needs a person and is not retried.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

from blamequeue.abc import ErrorMap, ErrorRule
from blamequeue.errors import QueueError

__all__ = ["map_store_error"]


def _primary_code(exc: BaseException) -> int | None:
    """The primary result code (the low byte of the extended one), one of ``sqlite3.SQLITE_*``."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _sqlite(*codes: int, words: tuple[str, ...] = ()) -> Callable[[BaseException], bool]:
    """A test for sqlite3 errors with one of these primary codes, or whose text holds one of
    ``words``."""

    def test(exc: BaseException) -> bool:
        if not isinstance(exc, sqlite3.Error):
            return False
        lowered = str(exc).lower()
        return _primary_code(exc) in codes or any(word in lowered for word in words)

    return test


def _misuse(word: str) -> Callable[[BaseException], bool]:
    return lambda exc: isinstance(exc, sqlite3.ProgrammingError) and word in str(exc).lower()


# Result codes of a database file a person must fix (not retried), and what to do.
_NEEDS_A_PERSON: Final = (
    (
        (sqlite3.SQLITE_FULL,),
        "{where}: the disk is full ({text}); free space on that volume (nothing of this call "
        "was written), then the queue resumes",
    ),
    (
        (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM),
        "{where}: the database is read-only ({text}); make the file and its directory writable "
        "by this process (SQLite also creates -wal and -shm files beside it)",
    ),
    (
        (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB),
        "{where}: the database file is corrupt or not a SQLite database ({text}); restore it "
        "from a backup (sqlite3's .recover may salvage rows) or point 'path' elsewhere",
    ),
    (
        (sqlite3.SQLITE_CANTOPEN,),
        "{where}: SQLite cannot open the database file ({text}); check that its directory "
        "exists and is writable",
    ),
)

_ERRORS: Final = ErrorMap(
    ErrorRule(
        when=sqlite3.IntegrityError,
        code="queue/bad-argument",
        message="{where}: a job id in this batch already exists ({text}); job ids must be "
        "unique, and nothing of the batch was stored",
    ),
    ErrorRule(
        when=_misuse("thread"),
        code="queue/invalid-config",
        message="{where}: the sqlite3.Connection given as 'store' was opened with "
        "check_same_thread=True, but the backend runs statements on a worker thread; open it "
        "with blamequeue_local.connect(path) or sqlite3.connect(path, check_same_thread=False)",
    ),
    ErrorRule(
        when=_misuse("closed"),
        message="{where}: the SQLite connection is closed; a connection passed as 'store' must "
        "stay open while the queue runs (reopen the queue after reopening it)",
    ),
    ErrorRule(
        when=_sqlite(sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, words=("locked", "busy")),
        retryable=True,
        message="{where}: the database is busy (another connection held its lock past "
        "busy_timeout): {text}; the call will be retried. If this persists, look for a long "
        "transaction on that file or raise busy_timeout",
    ),
    *(ErrorRule(when=_sqlite(*codes), message=message) for codes, message in _NEEDS_A_PERSON),
    ErrorRule(
        when=_sqlite(sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOMEM),
        retryable=True,
        message="{where}: SQLite reported a temporary failure ({text}); the call will be "
        "retried. If this persists, check the disk and the system logs",
    ),
    ErrorRule(
        when=_sqlite(words=("unknown database",)),
        code="queue/invalid-config",
        message="{where}: {text}; the schema named in option 'schema' must be attached to the "
        "store's connection (ATTACH DATABASE ... AS <schema>) before the queue opens",
    ),
    ErrorRule(
        when=sqlite3.Error,
        message="{where}: SQLite error ({kind}: {text}); this is not expected to go away by "
        "retrying, check the database file and the backend options",
    ),
    ErrorRule(
        when=UnicodeError,
        code="queue/bad-payload",
        message="{where}: text that is not valid Unicode (e.g. an unpaired surrogate) cannot be "
        "stored in SQLite: {text}; nothing was stored",
    ),
    ErrorRule(
        when=(OSError, TimeoutError),
        retryable=True,
        message="{where}: the store failed temporarily ({kind}: {text}); the call will be retried",
    ),
    otherwise=ErrorRule(
        when=Exception,
        message="{where}: the store raised {kind}: {text}; check the object passed as 'store' "
        "against blamequeue_local.Store",
    ),
)


def map_store_error(exc: Exception, *, where: str) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc``; ``where`` names the store."""
    return _ERRORS.map(exc, where=where)
