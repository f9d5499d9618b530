-- dlq_retry: one dead job back to pending.  Assembled as the queue prelude, revive.lua, this
-- file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, now.
-- Moves the dead job back to pending (attempts 0, due now, without its unique key: revive()).
-- Returns: its row as it was (JSON); '' when this queue has no dead job with that id.

local id, now = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
if f[1] ~= 'dead' then return '' end
local before = cjson.encode(row(id, f))
revive(id, key, f, now)
return before
