"""Job ids: ``"job-"`` + a ULID (48-bit millisecond time, 80 random bits, Crockford base32).

Ids sort by creation time across processes; within one process and one millisecond they are
strictly increasing (the random part is incremented), so enqueue order is also id order.
"""

from __future__ import annotations

import base64
import os
import threading
import time

__all__ = ["new_job_id", "new_id"]

# base64's RFC 4648 base32 alphabet, mapped onto Crockford's (no I, L, O, U).
_TO_CROCKFORD = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int) -> str:
    # 130 bits fit 26 base32 digits; pad to 160 bits (20 bytes) so base64 does the work in C.
    return base64.b32encode(value.to_bytes(20, "big")).decode("ascii")[6:].translate(_TO_CROCKFORD)


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
