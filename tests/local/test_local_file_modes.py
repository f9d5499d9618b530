"""The local backend's files are private (SPEC §6 "Files"): the database, its WAL and SHM files and
the seal key file beside them are created 0600 whatever the umask; a file that exists keeps the
mode its owner gave it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from blamequeue import Queue
from blamequeue_local import connect

pytestmark = pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX file modes")


@pytest.fixture
def umask_0(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The most permissive umask: whatever is created must set its own mode."""
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.anyio
async def test_database_wal_shm_and_key_file_are_0600_under_umask_0(
    tmp_path: Path, umask_0: None
) -> None:
    db = tmp_path / "jobs.db"
    async with Queue(backends={"b": {"protocol": "local", "path": str(db)}}) as queue:
        await queue.enqueue("q", {"n": 1})
        # The WAL and SHM files exist while a connection is open and has written.
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}.key")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_connect_creates_a_new_database_0600_under_umask_0(tmp_path: Path, umask_0: None) -> None:
    db = tmp_path / "own.db"
    connection = connect(db)
    try:
        connection.execute("CREATE TABLE t (x)")
        connection.execute("INSERT INTO t VALUES (1)")
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        connection.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path, umask_0: None) -> None:
    db = tmp_path / "shared.db"
    db.touch()
    db.chmod(0o640)  # the owner chose to share it with a group: not ours to change
    connect(db).close()
    assert mode(db) == 0o640


def test_connect_to_memory_creates_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    connect(":memory:").close()
    assert os.listdir(tmp_path) == []
