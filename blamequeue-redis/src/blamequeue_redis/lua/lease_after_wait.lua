-- lease_after_wait: the lease that follows a blocking wait (see wait_mark.lua).  Assembled as
-- the queue prelude, lease_due.lua, this file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, the caller's clock when it sent the wait, limit, token, lease seconds, the mark
--   key.
-- When the wait took a wake token, leases as lease.lua would at the caller's clock moved on by
-- the time the wait took (by the server's clock, the one clock both ends of the wait were read
-- on).
-- Returns: {rows (JSON), expires_at}; {'', ''} when the wait took no token.

local mark = redis.call('LRANGE', ARGV[6], 0, -1)
redis.call('DEL', ARGV[6])
if #mark < 2 then return {'', ''} end
local t = redis.call('TIME')
local waited = tonumber(t[1]) + tonumber(t[2]) / 1000000 - tonumber(mark[1])
if waited < 0 then waited = 0 end
local now = tonumber(ARGV[2]) + waited
local expires = string.format('%.17g', now + tonumber(ARGV[5]))
return {encode(lease_due(string.format('%.17g', now), tonumber(ARGV[3]), ARGV[4], expires)),
  expires}
