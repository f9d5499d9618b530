"""The audit file: one JSON object per line, each line keyed and chained to the one before.

Every line is written as the bytes::

    {"v":2,"seq":N,"kid":"<key id>","prev":"<mac of line N-1>",<event fields>,"mac":"<64 hex>"}\\n

``mac`` is HMAC-SHA256, under the *audit key*, of the exact bytes of the line before
``,"mac":"`` (from the opening brace to the end of the event's fields).  The audit key is never a
seal key itself: it is ``HMAC-SHA256(seal key, b"blamequeue audit chain v2")``, so a key of the
seal keyring (``kid``) can key the chain without the chain's MACs saying anything about it.
``prev`` is the ``mac`` of the line before (64 zeros on the first line) and ``seq`` the line's
1-based number, so the pair ``(seq, mac)`` of the last line, the *head*, names the whole chain.

Because the MAC covers raw bytes, verification never re-serialises parsed JSON: a line that
parses the same but differs (a duplicate key, other spacing, other key order) fails, and without
the key nobody can rewrite a line and recompute the links after it.  Cutting lines off the end
still leaves a valid, shorter chain: compare the head with one recorded elsewhere (``blamequeue
audit verify --expect-count N --expect-head H``; :class:`~blamequeue.LoggingAuditSink` logs the
head of the file sinks of its queue every ``head_every`` events and when the queue stops).

A crash mid-write leaves at most one torn last line (bytes without their newline).  The next
append, under the same lock, cuts those bytes off and writes an ``audit.recovery`` record in
their place, chained after the last whole line; the record keeps the torn bytes (base64, up to
64 KiB; their length and SHA-256 always), so ``verify`` passes and reports the recovery.

Files written before the chain was keyed (``prev`` and ``hash``: a SHA-256 chain anyone can
recompute) are reported as "written by an older version: unkeyed chain".  A keyed line appended
to such a file links to its last ``hash``, so once a keyed line follows them the older lines are
covered by that line's MAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import attrs

from ._audit import AuditEvent
from ._environment import parse_seal_keys
from ._sealing import _decode_keys, _env_config, load_or_create_key_file
from .errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the in-process lock still serialises writes
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FORMAT_VERSION",
    "GENESIS",
    "RECOVERY_EVENT",
    "ChainHead",
    "ChainReport",
    "JsonlAuditSink",
    "audit_key",
    "verify_chain",
]

log = logging.getLogger("blamequeue.audit")

FORMAT_VERSION = 2
GENESIS = "0" * 64
RECOVERY_EVENT = "audit.recovery"
_DERIVATION = b"blamequeue audit chain v2"
_MAC_OPEN = b',"mac":"'
_MAC_LINE_END = re.compile(rb',"mac":"([0-9a-f]{64})"\}\n\Z')
_MAC_SUFFIX = len(_MAC_OPEN) + 64 + 3  # ,"mac":" + 64 hex + "}\n
_TAIL_CHUNK = 65_536
_TORN_KEPT = 65_536
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_HOW_TO_KEY = (
    "set BLAMEQUEUE_SEAL_KEYS (`blamequeue keygen` makes a key), pass "
    'JsonlAuditSink(path, keys={"<kid>": "<base64 key>"}), or let the sink create its own key '
    "file (by default <audit file>.key) in a writable directory"
)


def audit_key(seal_key: bytes) -> bytes:
    """The chain's HMAC key derived from a 32-byte seal key (domain-separated: never the seal
    key itself)."""
    return hmac.new(seal_key, _DERIVATION, hashlib.sha256).digest()


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _config_error(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


def _keyring(keys: Mapping[str, str] | str, where: str) -> dict[str, bytes]:
    """``{kid: base64}`` or ``"kid:base64,..."`` decoded to ``{kid: 32 bytes}``, in order."""
    if isinstance(keys, str):
        keys = parse_seal_keys(keys, where=where)
    if not isinstance(keys, Mapping) or not keys:
        raise _config_error(
            f'{where} must be {{"<kid>": "<base64 key>", ...}} or "kid:base64,...", the first '
            f"key writing (make one with `blamequeue keygen`)"
        )
    return _decode_keys(keys, where)


@attrs.frozen(kw_only=True)
class ChainHead:
    """Where a chain ends: its number of lines and the ``mac`` of the last one."""

    count: int
    hash: str

    def __str__(self) -> str:
        return f"{self.count} {self.hash}"


# -- writing -----------------------------------------------------------------------------------
def _read_at(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset`` (seek and read: ``os.pread`` is not everywhere; the
    offset does not matter to appends, which ``O_APPEND`` puts at the end)."""
    os.lseek(fd, offset, os.SEEK_SET)
    parts = []
    while size > 0:
        part = os.read(fd, size)
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _tail(fd: int) -> tuple[int, bytes, bytes | None]:
    """``(size, torn, last)``: the file's size, the bytes after its last newline (a torn line;
    empty when the file ends whole) and the last whole line with its newline (None if none)."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0:
        return 0, b"", None
    size = min(end, _TAIL_CHUNK)
    while True:
        chunk = _read_at(fd, size, end - size)
        newline = chunk.rfind(b"\n")
        torn = chunk[newline + 1 :]
        if newline >= 0:
            start = chunk.rfind(b"\n", 0, newline)
            if start >= 0 or size == end:
                return end, torn, chunk[start + 1 : newline + 1]
        elif size == end:
            return end, torn, None
        size = min(end, size * 2)


def _lines_in(fd: int, size: int) -> int:
    return sum(_read_at(fd, _TAIL_CHUNK, at).count(b"\n") for at in range(0, size, _TAIL_CHUNK))


def _link_after(fd: int, size: int, last: bytes | None) -> tuple[int, str]:
    """``(seq, prev)`` of the line that follows ``last``, the last whole line of the file."""
    if last is None:
        return 1, GENESIS
    found = _MAC_LINE_END.search(last)
    seq = 0
    try:
        record = json.loads(last)
    except ValueError:
        record = None
    if isinstance(record, dict):
        number = record.get("seq")
        seq = number if isinstance(number, int) else 0
        if found is None and isinstance(record.get("hash"), str):
            # An older, unkeyed line: its lines carry no number, so count them (once).
            return _lines_in(fd, size) + 1, str(record["hash"])
    if found is not None:
        return seq + 1, found.group(1).decode("ascii")
    # Not a chain line (edited?): link to its bytes so appending goes on; verify names it.
    return seq + 1, hashlib.sha256(last).hexdigest()


def _line(key_id: str, key: bytes, seq: int, prev: str, fields: Mapping[str, Any]) -> bytes:
    record = {"v": FORMAT_VERSION, "seq": seq, "kid": key_id, "prev": prev, **fields}
    # default=str: data may hold values JSON has no type for; the MAC covers the text written.
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=True, default=str)
    body = text[:-1].encode("ascii")
    return body + _MAC_OPEN + _mac(key, body).encode("ascii") + b'"}\n'


def _mac_of(line: bytes) -> str:
    """The ``mac`` of a line :func:`_line` wrote."""
    return line[len(_MAC_OPEN) - _MAC_SUFFIX : -3].decode("ascii")


def _recovery_fields(torn: bytes, event: AuditEvent) -> dict[str, Any]:
    data: dict[str, Any] = {
        "torn_bytes": len(torn),
        "torn_sha256": hashlib.sha256(torn).hexdigest(),
    }
    if len(torn) <= _TORN_KEPT:
        data["torn"] = base64.b64encode(torn).decode("ascii")
    return {
        "name": RECOVERY_EVENT,
        "time": event.time.isoformat(),
        "backend": event.backend,
        "queue": None,
        "job_id": None,
        "trace_id": None,
        "classification": None,
        "data": data,
    }


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class JsonlAuditSink:
    """Appends each audit event to a keyed, chained JSON-lines file at ``path``.

    Where the chain's key comes from, first match wins:

    1. ``keys``: ``{"<kid>": "<base64 of 32 bytes>", ...}`` or ``"kid:base64,..."``;
    2. the seal keys of the queue the sink is given to (``Queue(audit_sinks=[...])``): those
       its default backend seals with (its config's ``seal``, ``Queue(seal=...)``,
       ``BLAMEQUEUE_SEAL_KEYS`` or the local backend's key file), unless they live only in this
       process (``memory``);
    3. ``BLAMEQUEUE_SEAL_KEYS``;
    4. the sink's own key file, ``key_file`` (default ``<path>.key``), created with mode 0600 on
       first use.  Keep it away from whoever may write the audit file: with it they can
       rewrite the chain.

    The first key writes; ``blamequeue audit verify`` accepts any key of the keyring (each line
    names its key id), so keys rotate like seal keys.  The chain resumes from the file's last
    line (several processes may share the file: appends take an advisory ``flock``); a torn
    last line is set aside by a recovery record (see the module docstring).  Writes run in a
    worker thread, one at a time; ``fsync=True`` forces each line to disk before ``emit``
    returns.  The file is created with mode 0600 and never through a symbolic link
    (``queue/invalid-config``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keys: Mapping[str, str] | str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        fsync: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.key_file = os.fspath(key_file) if key_file is not None else f"{self.path}.key"
        self.fsync = fsync
        self._keys: dict[str, bytes] | None = (
            None if keys is None else _keyring(keys, "JsonlAuditSink(keys=...)")
        )
        self._queue_keys: dict[str, bytes] | None = None
        self._writer: tuple[str, bytes] | None = None
        self._lock = anyio.Lock()
        self.head: ChainHead | None = None
        """The head after this sink's last write (None before its first)."""

    def __repr__(self) -> str:  # never the keys
        return f"JsonlAuditSink({self.path!r})"

    def use_seal_keys(self, keys: Mapping[str, bytes] | None) -> None:
        """The seal keys of the queue this sink serves (step 2 of the key order); the first
        queue to start with the sink gives them."""
        if keys and self._queue_keys is None:
            self._queue_keys = dict(keys)

    async def prepare(self) -> None:
        """Pick the key (creating the sink's key file if it comes to that) and check the path
        can be opened; raises ``queue/invalid-config`` saying what to fix.  Idempotent."""
        async with self._lock:
            await anyio.to_thread.run_sync(self._prepare)

    def _prepare(self) -> tuple[str, bytes]:
        if self._writer is None:
            keys = self._keys or self._queue_keys
            if not keys:
                config = _env_config(os.environ)
                keys = dict(config.keys) if config is not None else None
            if not keys:
                try:
                    keys, created = load_or_create_key_file(self.key_file)
                except OSError as exc:
                    raise _config_error(
                        f"the audit file {self.path} has no key and its key file "
                        f"{self.key_file} cannot be read or created ({exc.strerror or exc}); "
                        f"{_HOW_TO_KEY}"
                    ) from exc
                if created:
                    log.info("created audit key file %s (mode 0600)", self.key_file)
            kid, seal_key = next(iter(keys.items()))
            self._writer = (kid, audit_key(seal_key))
        os.close(self._open())
        return self._writer

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC
        try:
            return os.open(self.path, flags, 0o600)
        except OSError as exc:
            if os.path.islink(self.path):
                raise _config_error(
                    f"the audit file {self.path} is a symbolic link; audit files are never "
                    f"opened through a link (whoever placed it could send the trail "
                    f"elsewhere): give the real path"
                ) from None
            raise _config_error(
                f"cannot open the audit file {self.path} ({exc.strerror or exc}); make its "
                f"directory writable or pick another path"
            ) from exc

    async def emit(self, event: AuditEvent) -> None:
        async with self._lock:
            self.head = await anyio.to_thread.run_sync(self._append, event)

    def _append(self, event: AuditEvent) -> ChainHead:
        kid, key = self._prepare() if self._writer is None else self._writer
        fd = self._open()
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # released when the file closes
            size, torn, last = _tail(fd)
            seq, prev = _link_after(fd, size - len(torn), last)
            out = b""
            if torn:
                # A crash cut the last write short: set its bytes aside in a recovery record
                # chained after the last whole line, so the chain goes on and verify says so.
                os.ftruncate(fd, size - len(torn))
                out = _line(kid, key, seq, prev, _recovery_fields(torn, event))
                seq, prev = seq + 1, _mac_of(out)
                log.warning(
                    "audit file %s ended in a torn line of %d bytes (an interrupted write); "
                    "set aside in a recovery record at line %d",
                    self.path,
                    len(torn),
                    seq - 1,
                )
            line = _line(kid, key, seq, prev, event.to_dict())
            _write_all(fd, out + line)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return ChainHead(count=seq, hash=_mac_of(line))


# -- verifying ---------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Recovery:
    """A recovery record met by :func:`verify_chain`."""

    line: int
    torn_bytes: int


@attrs.frozen(kw_only=True)
class ChainReport:
    """The outcome of :func:`verify_chain`."""

    events: int
    """Lines that verified (all of them when ``ok``), recovery records and older lines
    included."""
    last_hash: str
    """The link of the last line that verified (:data:`GENESIS` for an empty file)."""
    bad_line: int | None = None
    """1-based number of the first line that does not hold, or None."""
    problem: str | None = None
    unkeyed: int = 0
    """Leading lines written by an older version (an unkeyed SHA-256 chain)."""
    covered: bool = False
    """Whether a keyed line follows the older lines (its MAC then covers them)."""
    key_ids: tuple[str, ...] = ()
    """The key ids the keyed lines name, in order of first use."""
    recoveries: tuple[Recovery, ...] = ()
    marks: tuple[str, ...] = attrs.field(default=(), repr=False)
    """The link of every line that verified, in order (to find a recorded head)."""

    @property
    def ok(self) -> bool:
        return self.bad_line is None

    @property
    def head(self) -> ChainHead:
        return ChainHead(count=self.events, hash=self.last_hash)

    def holds(self, count: int | None, head: str | None) -> str | None:
        """Why the chain does not reach a head recorded elsewhere (``count`` lines, last link
        ``head``), or None when it does."""
        if count is not None and self.events < count:
            return (
                f"the chain has {self.events} lines, fewer than the {count} recorded: lines "
                f"were cut off its end"
            )
        if head is None:
            return None
        head = head.strip().lower()
        if count is not None:
            at = self.marks[count - 1] if count else GENESIS
            if at != head:
                return (
                    f"line {count} of the chain is not the recorded head {head[:16]}...: the "
                    f"chain was rewritten, or this is another file"
                )
            return None
        if head not in self.marks and head != GENESIS:
            return (
                f"the recorded head {head[:16]}... is not in the chain: lines were cut off its "
                f"end, or the chain was rewritten"
            )
        return None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        raise ValueError("duplicate key")
    return record


def verify_chain(path: str | os.PathLike[str], keys: Mapping[str, bytes]) -> ChainReport:
    """Check every line's MAC and link against ``keys`` (``{kid: seal key}``, any may have
    written); stop at the first line that does not hold.  Works on the raw bytes."""
    derived = {kid: audit_key(key) for kid, key in keys.items()}
    prev = GENESIS
    count = unkeyed = 0
    key_ids: list[str] = []
    recoveries: list[Recovery] = []
    marks: list[str] = []

    def report(number: int | None = None, problem: str | None = None) -> ChainReport:
        return ChainReport(
            events=count,
            last_hash=prev,
            bad_line=number,
            problem=problem,
            unkeyed=unkeyed,
            covered=unkeyed < count,
            key_ids=tuple(key_ids),
            recoveries=tuple(recoveries),
            marks=tuple(marks),
        )

    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.endswith(b"\n"):
                return report(
                    number,
                    "the line is cut short (no newline): a write was interrupted and no event "
                    "was appended since (the next append sets it aside)",
                )
            try:
                record = json.loads(raw, object_pairs_hook=_no_duplicates)
            except ValueError:
                return report(number, "not a JSON object with unique keys: edited or inserted")
            if not isinstance(record, dict):
                return report(number, "not a JSON object: edited or inserted")
            found = _MAC_LINE_END.search(raw)
            if found is None and "hash" in record and "mac" not in record:
                if count > unkeyed:
                    return report(
                        number,
                        "an unkeyed line (written by an older version) after keyed ones: inserted",
                    )
                link = _older_link(record)
                if link is None or record.get("prev") != prev:
                    return report(
                        number,
                        "written by an older version: unkeyed chain, and this line does not "
                        "hold (edited, removed, inserted or moved)",
                    )
                prev, count, unkeyed = link, count + 1, unkeyed + 1
                marks.append(prev)
                continue
            if found is None or record.get("v") != FORMAT_VERSION:
                return report(number, "not a keyed chain record: edited or inserted")
            named = record.get("kid")
            kid = named if isinstance(named, str) else str(named)
            key = derived.get(kid)
            if key is None:
                return report(
                    number,
                    f"written with key id {kid[:64]!r}, which is not among the keys given "
                    f"({', '.join(derived) or 'none'}): give that key to check it",
                )
            mac = found.group(1).decode("ascii")
            if not hmac.compare_digest(_mac(key, raw[:-_MAC_SUFFIX]), mac):
                return report(
                    number,
                    "its bytes do not match its MAC: the line was edited (or re-spaced, or "
                    "a key repeated), or it was forged without the key",
                )
            if record.get("seq") != number or record.get("prev") != prev:
                where = (
                    "it does not start the chain: lines before it were removed"
                    if number == 1
                    else f"it does not follow line {number - 1}: a line was removed, "
                    f"inserted or moved here"
                )
                return report(number, where)
            if record.get("name") == RECOVERY_EVENT and record.get("job_id") is None:
                data = record.get("data")
                torn = data.get("torn_bytes") if isinstance(data, dict) else None
                recoveries.append(Recovery(line=number, torn_bytes=int(torn or 0)))
            if kid not in key_ids:
                key_ids.append(kid)
            prev, count = mac, count + 1
            marks.append(prev)
    return report()


def _older_link(record: dict[str, Any]) -> str | None:
    """Check a line of the older, unkeyed format (SHA-256 of its canonical JSON without
    ``hash``); its ``hash`` when it holds, else None.  Such a line proves nothing by itself."""
    claimed = record.pop("hash")
    canonical = json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    if not isinstance(claimed, str):
        return None
    if hashlib.sha256(canonical.encode("utf-8")).hexdigest() != claimed:
        return None
    return claimed


def read_keyring(sources: Iterable[Mapping[str, bytes]]) -> dict[str, bytes]:
    """Several keyrings merged (the first holding a key id wins)."""
    merged: dict[str, bytes] = {}
    for keys in sources:
        for kid, key in keys.items():
            merged.setdefault(kid, key)
    return merged
