"""The Lua script behind the ``redis`` backend's ``queue_stats`` (health checks).

Delayed jobs are counted in the ``delayed`` zset (score ``available_at``).  The longest-waiting
due job is found without walking the backlog: ``ready`` is scored by ``-priority`` and, within
one score, ordered by its members, which start with the job's ``available_at`` (16 hex digits,
then 16 of seq, then the id), so the first member of each score is that priority's oldest; the
script visits the first member of at most :data:`PRIORITIES_SCANNED` distinct priorities, plus
the earliest job in ``delayed`` that came due but was not moved to ``ready`` yet.
"""

from __future__ import annotations

from typing import Final

from blamequeue_redis._scripts import _script

__all__ = ["PRIORITIES_SCANNED", "QUEUE_STATS"]

#: The most distinct priorities one ``queue_stats`` call looks at.
PRIORITIES_SCANNED: Final = 64

# ARGV: base, now.  Returns {delayed count, earliest due available_at ('' = none)}.
QUEUE_STATS: Final = _script(
    "queue_stats",
    f"""
local now = ARGV[2]
local delayed = redis.call('ZCOUNT', K_DELAYED, '(' .. now, '+inf')
local oldest, oldest_text = nil, ''
local function consider(at)
  local n = tonumber(at)
  if n and (oldest == nil or n < oldest) then oldest, oldest_text = n, at end
end
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #due > 0 then consider(redis.call('HGET', jkey(due[1]), 'available_at')) end
local score = '-inf'
for _ = 1, {PRIORITIES_SCANNED} do
  local head = redis.call('ZRANGEBYSCORE', K_READY, score, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #head == 0 then break end
  consider(redis.call('HGET', jkey(string.sub(head[1], 33)), 'available_at'))
  score = '(' .. head[2]
end
return {{delayed, oldest_text}}
""",
)
