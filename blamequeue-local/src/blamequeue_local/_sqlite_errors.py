"""Mapping of ``sqlite3`` (and store) exceptions to :class:`~blamequeue.errors.QueueError`.

The backend calls :func:`map_store_error` at its boundary, so no ``sqlite3`` exception ever
reaches the core.  A busy or locked database is temporary (retried, counted by the breaker);
a full disk, a read-only, unopenable or corrupt file needs a person and is not retried.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from blamequeue.errors import (
    BackendUnavailableError,
    BadArgumentError,
    ConfigError,
    QueueError,
)

__all__ = ["map_store_error"]

# Primary result codes (the low byte of an extended code), from sqlite3.h.
_BUSY: Final = 5
_LOCKED: Final = 6
_NOMEM: Final = 7
_READONLY: Final = 8
_IOERR: Final = 10
_CORRUPT: Final = 11
_FULL: Final = 13
_CANTOPEN: Final = 14
_PERM: Final = 3
_NOTADB: Final = 26


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def map_store_error(exc: Exception, *, where: str) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc``; ``where`` names the store."""
    if isinstance(exc, QueueError):
        return exc
    if isinstance(exc, sqlite3.Error):
        return _map_sqlite(exc, where)
    if isinstance(exc, UnicodeError):
        return BadArgumentError(
            "queue/bad-payload",
            f"{where}: text that is not valid Unicode (e.g. an unpaired surrogate) cannot be "
            f"stored in SQLite: {exc}; nothing was stored",
        )
    if isinstance(exc, OSError | TimeoutError):
        return BackendUnavailableError(
            f"{where}: the store failed temporarily ({type(exc).__name__}: {exc}); "
            f"the call will be retried"
        )
    return BackendUnavailableError(
        f"{where}: the store raised {type(exc).__name__}: {exc}; check the object passed as "
        f"'store' against blamequeue_local.Store",
        retryable=False,
    )


def _map_sqlite(exc: sqlite3.Error, where: str) -> QueueError:
    text = str(exc)
    lowered = text.lower()
    code = _primary_code(exc)

    if isinstance(exc, sqlite3.IntegrityError):
        return BadArgumentError(
            "queue/bad-argument",
            f"{where}: a job id in this batch already exists ({text}); job ids must be unique, "
            f"and nothing of the batch was stored",
        )
    if isinstance(exc, sqlite3.ProgrammingError):
        if "thread" in lowered:
            return ConfigError(
                "queue/invalid-config",
                f"{where}: the sqlite3.Connection given as 'store' was opened with "
                f"check_same_thread=True, but the backend runs statements on a worker thread; "
                f"open it with blamequeue_local.connect(path) or "
                f"sqlite3.connect(path, check_same_thread=False)",
            )
        if "closed" in lowered:
            return BackendUnavailableError(
                f"{where}: the SQLite connection is closed; a connection passed as 'store' must "
                f"stay open while the queue runs (reopen the queue after reopening it)",
                retryable=False,
            )
    if code in (_BUSY, _LOCKED) or "locked" in lowered or "busy" in lowered:
        return BackendUnavailableError(
            f"{where}: the database is busy (another connection held its lock past "
            f"busy_timeout): {text}; the call will be retried. If this persists, look for a "
            f"long transaction on that file or raise busy_timeout"
        )
    if code == _FULL:
        return BackendUnavailableError(
            f"{where}: the disk is full ({text}); free space on that volume (nothing of this "
            f"call was written), then the queue resumes",
            retryable=False,
        )
    if code in (_READONLY, _PERM):
        return BackendUnavailableError(
            f"{where}: the database is read-only ({text}); make the file and its directory "
            f"writable by this process (SQLite also creates -wal and -shm files beside it)",
            retryable=False,
        )
    if code in (_CORRUPT, _NOTADB):
        return BackendUnavailableError(
            f"{where}: the database file is corrupt or not a SQLite database ({text}); restore "
            f"it from a backup (sqlite3's .recover may salvage rows) or point 'path' elsewhere",
            retryable=False,
        )
    if code == _CANTOPEN:
        return BackendUnavailableError(
            f"{where}: SQLite cannot open the database file ({text}); check that its directory "
            f"exists and is writable",
            retryable=False,
        )
    if code in (_IOERR, _NOMEM):
        return BackendUnavailableError(
            f"{where}: SQLite reported a temporary failure ({text}); the call will be retried. "
            f"If this persists, check the disk and the system logs"
        )
    if "unknown database" in lowered:
        return ConfigError(
            "queue/invalid-config",
            f"{where}: {text}; the schema named in option 'schema' must be attached to the "
            f"store's connection (ATTACH DATABASE ... AS <schema>) before the queue opens",
        )
    return BackendUnavailableError(
        f"{where}: SQLite error ({type(exc).__name__}: {text}); this is not expected to go away "
        f"by retrying, check the database file and the backend options",
        retryable=False,
    )
