"""Cross-process wake-up for the ``local`` backend: noticing another process's commit.

SQLite has no notifications, but in WAL mode every commit writes to ``<db>-wal`` (appending
frames, or rewriting them from the start after a checkpoint), and a checkpoint rewrites the
main file.  A :class:`FileSignature` is the size and change times of both, read with
``os.stat`` in a microsecond or two and without a thread hop, so polling it every ~20 ms costs
nothing measurable.

Only ``stat`` is used, never ``open``: closing any descriptor of a database file drops every
POSIX lock the process holds on it, including SQLite's own, which lets another process reset
the shared-memory index under a live connection (and crash it with SIGBUS).
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["POLL_INTERVAL", "FileSignature", "Signature"]

POLL_INTERVAL: Final = 0.02
"""Seconds between two looks at the files while waiting for work."""

Signature = tuple[tuple[int, int, int] | None, ...]


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileSignature:
    """A cheap fingerprint of a SQLite database file's last commit."""

    def __init__(self, db_path: str) -> None:
        self.db_path = os.path.abspath(db_path)  # immune to a later chdir()
        self._wal = self.db_path + "-wal"

    def read(self) -> Signature:
        """Blocking but cheap (two ``stat`` calls): call it from the event loop."""
        return (_stat(self._wal), _stat(self.db_path))
