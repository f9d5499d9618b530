"""Job ids: ``"job-"`` + a ULID (48-bit millisecond time, 80 random bits, Crockford base32).

Ids sort by creation time across processes; within one process and one millisecond they are
strictly increasing (the random part is incremented), so enqueue order is also id order.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_job_id", "new_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id() -> str:
    """A 26-character ULID; monotonic within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            _last_ms = ms
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        return _encode((ms << 80) | _last_rand)


def new_job_id() -> str:
    return "job-" + new_id()
