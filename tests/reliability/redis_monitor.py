"""Reads a ``redis`` backend's keys beside the processes under test (not a test module).

The reliability scenarios check what Redis holds independently of the queue under test: each
read here is one Lua script or one pipeline on a plain redis-py client, so it sees one instant
(a script runs atomically) and keeps working while the backend's own clients are failing.
The key layout is the backend's (``blamequeue_redis._keys``, ``docs/backends/redis.md``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import redis

from blamequeue.abc import JOB_STATES
from blamequeue_redis._keys import DEFAULT_PREFIX, KeyLayout

__all__ = ["RedisMonitor"]

# Every (id, token) pair in the inflight zset, read in one script.
_LEASES = """
local out = {}
for _, id in ipairs(redis.call('ZRANGE', ARGV[1] .. 'inflight', 0, -1)) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', ARGV[1] .. 'job:' .. id, 'token') or ''
end
return out
"""

# (id, token, state) of each id in ARGV[2..], read in one script; a missing job has state ''.
_STATES = """
local out = {}
for i = 2, #ARGV do
  local f = redis.call('HMGET', ARGV[1] .. 'job:' .. ARGV[i], 'token', 'state')
  out[#out + 1] = ARGV[i]
  out[#out + 1] = f[1] or ''
  out[#out + 1] = f[2] or ''
end
return out
"""


def _pairs(flat: list[str], width: int) -> Iterable[tuple[str, ...]]:
    return zip(*(flat[n::width] for n in range(width)), strict=True)


class RedisMonitor:
    """One queue's keys on one server: the crash scenario's :class:`crash_fleet.Monitor`, and
    what the restart scenario asks after each restart."""

    def __init__(self, url: str, queue: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.base = KeyLayout(prefix).queue(queue).base
        self._leases = self.client.register_script(_LEASES)
        self._states = self.client.register_script(_STATES)

    def close(self) -> None:
        self.client.close()

    def done_count(self) -> int:
        return int(self.client.zcard(self.base + "st:done"))

    def leases(self) -> frozenset[tuple[str, str]]:
        flat = self._leases(keys=[], args=[self.base])
        return frozenset((job_id, token) for job_id, token in _pairs(flat, 2))

    def states(self, ids: Collection[str]) -> list[tuple[str, str | None, str]]:
        if not ids:
            return []
        flat = self._states(keys=[], args=[self.base, *ids])
        return [(job_id, token or None, state) for job_id, token, state in _pairs(flat, 3)]

    def counts(self) -> dict[str, int]:
        """Jobs per state, leaving out the states no job is in."""
        with self.client.pipeline(transaction=True) as pipe:
            for state in JOB_STATES:
                pipe.zcard(self.base + f"st:{state}")
            numbers = pipe.execute()
        return {state: int(n) for state, n in zip(JOB_STATES, numbers, strict=True) if n}

    def ids(self, state: str) -> set[str]:
        return set(self.client.zrange(self.base + f"st:{state}", 0, -1))

    def stored(self, ids: Collection[str]) -> set[str]:
        """Those of ``ids`` whose job exists (in any state)."""
        chosen = list(ids)
        found: set[str] = set()
        for start in range(0, len(chosen), 1000):
            chunk = chosen[start : start + 1000]
            with self.client.pipeline(transaction=False) as pipe:
                for job_id in chunk:
                    pipe.exists(self.base + "job:" + job_id)
                exists = pipe.execute()
            found.update(job_id for job_id, there in zip(chunk, exists, strict=True) if there)
        return found
