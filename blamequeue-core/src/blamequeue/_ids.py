"""Job ids: ``"job-"`` + a ULID (48-bit millisecond time, 80 random bits, Crockford base32).

Ids sort by creation time across processes; within one process and one millisecond they are
strictly increasing (the random part is incremented), so enqueue order is also id order.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_id", "new_job_id", "new_job_ids"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # no I, L, O, U
# Every 10-bit value as its two digits: 13 lookups spell an id (half the time of base64's
# base32, which is written in Python).
_PAIRS = tuple(high + low for high in _CROCKFORD for low in _CROCKFORD)
_SHIFTS = tuple(range(120, -1, -10))
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int) -> str:
    """``value`` (at most 130 bits) as 26 Crockford base32 digits, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def _new_values(count: int) -> range:
    """``count`` consecutive ULID values, after every value handed out before."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            first = _last_rand + 1
        else:
            _last_ms = ms
            first = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        # The random part counts up from below 2**79, so any batch fits; were it to pass
        # 2**80 it would carry into the time part, still after every id made before.
        start = (ms << 80) + first
        end = start + count
        _last_ms, _last_rand = (end - 1) >> 80, (end - 1) & ((1 << 80) - 1)
        return range(start, end)


def new_id() -> str:
    """A 26-character ULID; monotonic within this process."""
    return _encode(_new_values(1)[0])


def new_job_id() -> str:
    return "job-" + new_id()


def new_job_ids(count: int) -> list[str]:
    """``count`` job ids, increasing, as :func:`new_job_id` would make them one by one.

    Consecutive values share all but their last two digits within each aligned run of 1024,
    so a batch spells one head per run and appends the pair: a tenth of spelling each id.
    """
    values = _new_values(count)
    if count == 1:
        return ["job-" + _encode(values.start)]
    ids: list[str] = []
    value, end = values.start, values.stop
    while value < end:
        block = value >> 10
        head = "job-" + _encode(block << 10)[:-2]
        stop = min(end, (block + 1) << 10)
        ids += [head + pair for pair in _PAIRS[value & 1023 : ((stop - 1) & 1023) + 1]]
        value = stop
    return ids
