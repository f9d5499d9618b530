"""The Lua script behind the ``redis`` backend's ``queue_stats`` (health checks):
``lua/queue_stats.lua``, after the queue prelude of :mod:`blamequeue_redis._scripts`.

Delayed jobs are counted in the ``delayed`` zset (score ``available_at``).  The longest-waiting
due job is found without walking the backlog: ``ready`` is scored by ``-priority`` and, within
one score, ordered by its members, which start with the job's ``available_at`` (16 hex digits,
then 16 of seq, then the id), so the first member of each score is that priority's oldest (of
a lifo band, scored ``-priority - 0.5`` with its members' digits flipped, the last is); the
script visits one member of at most :data:`PRIORITIES_SCANNED` distinct scores (a priority with
lifo jobs has two), plus the earliest job in ``delayed`` that came due but was not moved to
``ready`` yet.
"""

from __future__ import annotations

from typing import Final

from blamequeue_redis._scripts import _script, read_lua

__all__ = ["PRIORITIES_SCANNED", "QUEUE_STATS"]

#: The most distinct priorities one ``queue_stats`` call looks at.
PRIORITIES_SCANNED: Final = 64

# KEYS, ARGV and reply: the top of lua/queue_stats.lua.
QUEUE_STATS: Final = _script(
    "queue_stats", read_lua("queue_stats", PRIORITIES_SCANNED=PRIORITIES_SCANNED)
)
