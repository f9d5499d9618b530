"""The Lua scripts of the ``redis`` backend's shared records (``Capabilities.records``).

The records of one kind share a Cluster hash tag, ``R = <prefix>:rec:{<kind>}``, so one script
sees them together:

* ``R:v:<key>`` (hash): ``e`` (always ``1``: an empty record still exists), ``v`` the value,
  ``x`` the expiry, ``c:<name>`` each counter (``HINCRBYFLOAT``);
* ``R:t:<key>`` (set): the ``once`` tokens the record applied;
* ``R:keys`` (zset, every score 0): the kind's keys, for listing in key order (``ZRANGEBYLEX``);
* ``R:exp`` (zset): the keys that expire, scored by expiry, for pruning.

A record whose expiry has passed is deleted by the first script that touches it, so every
script sees only live records, and a recreated record starts without counters or tokens.
The set ``<prefix>:rec-kinds`` names every kind, so a sweep can prune them all.
"""

from __future__ import annotations

from typing import Final

from blamequeue_redis._scripts import Script

__all__ = [
    "RECORD_ADD",
    "RECORD_DELETE",
    "RECORD_GET",
    "RECORD_LIST",
    "RECORD_PRUNE",
    "RECORD_PUT",
    "RECORD_SCRIPTS",
]

# Helpers every records script starts with.  ARGV[1] is always R (the kind's key base).
_PRELUDE = """
local base = ARGV[1]
local function drop(key)
  redis.call('DEL', base .. ':v:' .. key, base .. ':t:' .. key)
  redis.call('ZREM', base .. ':keys', key)
  redis.call('ZREM', base .. ':exp', key)
end
-- Whether the record of key is live; an expired one is deleted on the way.
local function live(key, now)
  local h = base .. ':v:' .. key
  local x = redis.call('HGET', h, 'x')
  if x and tonumber(x) <= tonumber(now) then
    drop(key)
    return false
  end
  return redis.call('EXISTS', h) == 1
end
local function row(key)
  local all = redis.call('HGETALL', base .. ':v:' .. key)
  local v, x, c = false, '', {}
  for i = 1, #all, 2 do
    local f = all[i]
    if f == 'v' then v = all[i + 1]
    elseif f == 'x' then x = all[i + 1]
    elseif string.sub(f, 1, 2) == 'c:' then
      c[#c + 1] = string.sub(f, 3)
      c[#c + 1] = all[i + 1]
    end
  end
  return {key, v, x, c}
end
local function expire(key, at)
  local h = base .. ':v:' .. key
  if at == '' then
    redis.call('HDEL', h, 'x')
    redis.call('ZREM', base .. ':exp', key)
  else
    redis.call('HSET', h, 'x', at)
    redis.call('ZADD', base .. ':exp', at, key)
  end
end
"""


def _records_script(name: str, body: str) -> Script:
    return Script(name, _PRELUDE + body)


# ARGV: R, key, value, now, expires_at ('' = none), if_absent ('1' or '').  Returns 1 when
# it wrote, 0 when if_absent found a live record.
RECORD_PUT: Final = _records_script(
    "record_put",
    """
local key = ARGV[2]
if live(key, ARGV[4]) and ARGV[6] == '1' then return 0 end
redis.call('HSET', base .. ':v:' .. key, 'e', '1', 'v', ARGV[3])
expire(key, ARGV[5])
redis.call('ZADD', KEYS[1], 0, key)
return 1
""",
)

# ARGV: R, key, now, expires_at ('' = keep), once ('' = none), then name, delta pairs.
# Returns {applied (1/0), row}.
RECORD_ADD: Final = _records_script(
    "record_add",
    """
local key = ARGV[2]
live(key, ARGV[3])
if ARGV[5] ~= '' and redis.call('SADD', base .. ':t:' .. key, ARGV[5]) == 0 then
  return {0, row(key)}
end
local h = base .. ':v:' .. key
redis.call('HSET', h, 'e', '1')
for i = 6, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', h, 'c:' .. ARGV[i], ARGV[i + 1])
end
if ARGV[4] ~= '' then expire(key, ARGV[4]) end
redis.call('ZADD', KEYS[1], 0, key)
return {1, row(key)}
""",
)

# ARGV: R, now, key...  Returns one entry per key: its row, or false.
RECORD_GET: Final = _records_script(
    "record_get",
    """
local out = {}
for i = 3, #ARGV do
  if live(ARGV[i], ARGV[2]) then out[#out + 1] = row(ARGV[i]) else out[#out + 1] = false end
end
return out
""",
)

# ARGV: R, now, lex min ('[prefix' or '-'), lex max ('(bound' or '+'), limit (-1 = none).
# Prunes the kind's expired records first, so the page holds only live ones.
RECORD_LIST: Final = _records_script(
    "record_list",
    """
local gone = redis.call('ZRANGEBYSCORE', base .. ':exp', '-inf', ARGV[2])
for i = 1, #gone do drop(gone[i]) end
local keys = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[3], ARGV[4], 'LIMIT', 0, ARGV[5])
local out = {}
for i = 1, #keys do out[#out + 1] = row(keys[i]) end
return out
""",
)

# ARGV: R, key.  Returns 1 when a record was stored.
RECORD_DELETE: Final = _records_script(
    "record_delete",
    """
local existed = redis.call('EXISTS', base .. ':v:' .. ARGV[2])
drop(ARGV[2])
return existed
""",
)

# ARGV: R, now.  Deletes the kind's expired records; returns how many.
RECORD_PRUNE: Final = _records_script(
    "record_prune",
    """
local gone = redis.call('ZRANGEBYSCORE', base .. ':exp', '-inf', ARGV[2])
for i = 1, #gone do drop(gone[i]) end
return #gone
""",
)

RECORD_SCRIPTS: Final = (
    RECORD_PUT,
    RECORD_ADD,
    RECORD_GET,
    RECORD_LIST,
    RECORD_DELETE,
    RECORD_PRUNE,
)
