-- worker_list: the live workers' records.  A registry script: no prelude.
--
-- KEYS: the records hash, the heartbeats zset (one hash tag, one slot).
-- ARGV: alive_since.
-- Deletes the records heartbeated before alive_since (in this script, so a heartbeat landing
-- meanwhile is never pruned).
-- Returns: the other records (JSON each), as a flat list.

local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1])
for i = 1, #stale, 4000 do
  local j = math.min(i + 3999, #stale)
  redis.call('HDEL', KEYS[1], unpack(stale, i, j))
  redis.call('ZREM', KEYS[2], unpack(stale, i, j))
end
return redis.call('HVALS', KEYS[1])
