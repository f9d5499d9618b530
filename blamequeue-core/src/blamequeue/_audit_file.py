"""The tamper-evident audit file: one JSON object per line, each chained to the one before.

Every line is the event (:meth:`AuditEvent.to_dict`) plus two fields:

* ``prev``: the ``hash`` of the line before it (64 zeros on the first line);
* ``hash``: SHA-256 (hex) of the canonical JSON of the line without ``hash`` (keys sorted, no
  spaces, UTF-8).

Editing a line breaks its hash; removing, inserting or reordering lines breaks the ``prev`` link
of the line that follows.  ``blamequeue audit verify FILE`` checks both and names the first line
that does not hold.  A chain without a secret shows tampering, it cannot stop someone who
rewrites the whole file from the edit onwards, nor tell that lines were cut off the end: keep
the last hash it reports somewhere else (a log shipper, a ticket) to anchor it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import IO, Any

import anyio
import attrs

from ._audit import AuditEvent

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the in-process lock still serialises writes
    fcntl = None  # type: ignore[assignment]

__all__ = ["GENESIS", "ChainReport", "JsonlAuditSink", "verify_chain"]

GENESIS = "0" * 64
_TAIL_CHUNK = 65_536


def _canonical(record: Mapping[str, Any]) -> str:
    # default=str: progress data may hold values JSON has no type for; the line still verifies
    # because verification hashes the parsed (already stringified) values.
    return json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


def _hash(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(record).encode("utf-8")).hexdigest()


def _last_line(handle: IO[bytes]) -> bytes | None:
    """The last line of the file (without its newline), or None when it is empty."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return None
    size = min(end, _TAIL_CHUNK)
    while True:
        handle.seek(end - size)
        chunk = handle.read(size)
        body = chunk[:-1] if chunk.endswith(b"\n") else chunk
        cut = body.rfind(b"\n")
        if cut >= 0 or size == end:
            return body[cut + 1 :]
        size = min(end, size * 2)


def _link_of(line: bytes) -> str:
    """What the next line's ``prev`` must be: this line's ``hash`` (or, for a line that is not
    a chain record, the hash of its bytes, so appending continues and verify flags that line)."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if isinstance(record, dict) and isinstance(record.get("hash"), str):
        return str(record["hash"])
    return hashlib.sha256(line).hexdigest()


class JsonlAuditSink:
    """Appends each audit event to a hash-chained JSON-lines file at ``path``.

    The chain resumes from the file's last line, so restarts (and several processes sharing the
    file: appends take an advisory ``flock``) extend one chain.  Writes run in a worker thread
    and one at a time; ``fsync=True`` forces each line to disk before ``emit`` returns.  The
    file is created with mode 0600.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"JsonlAuditSink({self.path!r})"

    async def emit(self, event: AuditEvent) -> None:
        record = event.to_dict()
        async with self._lock:
            await anyio.to_thread.run_sync(self._append, record)

    def _append(self, record: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a+b") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file closes
            last = _last_line(handle)
            record["prev"] = GENESIS if last is None else _link_of(last)
            record["hash"] = _hash(record)
            line = (_canonical(record) + "\n").encode("utf-8")
            if last is not None:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":  # a line cut short by a crash: end it first
                    line = b"\n" + line
            handle.write(line)
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())


@attrs.frozen(kw_only=True)
class ChainReport:
    """The outcome of :func:`verify_chain`."""

    events: int
    """Lines that verified (all of them when ``ok``)."""
    last_hash: str
    """The hash of the last line that verified (:data:`GENESIS` for an empty file)."""
    bad_line: int | None = None
    """1-based number of the first line that does not hold, or None."""
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.bad_line is None


def verify_chain(path: str | os.PathLike[str]) -> ChainReport:
    """Check every line's hash and link; stop at the first line that does not hold."""
    prev = GENESIS
    count = 0

    def bad(number: int, problem: str) -> ChainReport:
        return ChainReport(events=count, last_hash=prev, bad_line=number, problem=problem)

    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.endswith(b"\n"):
                return bad(number, "the line is cut short (no newline): a write was interrupted")
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                return bad(number, "not a JSON object: the line was edited or inserted")
            if not isinstance(record, dict) or not isinstance(record.get("hash"), str):
                return bad(number, "not a chained audit record (no hash): edited or inserted")
            claimed = record.pop("hash")
            if _hash(record) != claimed:
                return bad(number, "its content does not match its hash: the line was edited")
            if record.get("prev") != prev:
                where = (
                    "it does not start the chain: lines before it were removed"
                    if number == 1
                    else f"it does not follow line {number - 1}: a line was removed, inserted "
                    f"or moved here, or line {number - 1} was edited and re-hashed"
                )
                return bad(number, where)
            prev = claimed
            count += 1
    return ChainReport(events=count, last_hash=prev)
