-- dlq_retry: one dead job back to pending.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, now.
-- Moves the dead job back to pending (attempts 0, due now, without its unique key).
-- Returns: its row as it was (JSON); '' when this queue has no dead job with that id.

local id, now = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
if f[1] ~= 'dead' then return '' end
local before = cjson.encode(row(id, f))
redis.call('ZREM', K_DEAD, id)
redis.call('HSET', key, 'state', 'pending', 'attempts', '0', 'available_at', now)
move(id, f[15], 'dead', 'pending')
release_unique(id, redis.call('HGET', key, 'unique_key'))  -- back without its unique key
redis.call('HDEL', key, 'finished_at', 'unique_key', 'unique_until')
local woken = pend(id, now, f[3], f[15], now, f[18])
flush()
signal(woken)
return before
