"""blamequeue's ``redis`` backend: jobs in Redis, every transition one atomic Lua script.

Install it with ``pip install blamequeue[redis]``, then::

    Queue(backends={"fast": {"protocol": "redis", "url": "redis://127.0.0.1:6379/0"}},
          seal={"keys": {"k1": "<base64 of 32 bytes>"}})     # `blamequeue keygen` makes one

Payloads leave the process, so a seal key is required (or ``seal=False``).  Priority and delay
live in sorted sets, leases are fenced by token, idle consumers block on ``BLPOP`` (no polling),
and every key of a queue carries the queue name as a hash tag, so it runs on Redis Cluster too.
It runs on asyncio (redis-py's asyncio client) and on trio (redis-py's sync client in worker
threads).  Options, key layout and scripts: ``docs/backends/redis.md``.
"""

from __future__ import annotations

from blamequeue_redis._backend import RedisBackend

__all__ = ["RedisBackend"]
