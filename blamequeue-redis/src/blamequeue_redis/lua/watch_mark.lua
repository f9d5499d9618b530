-- watch_mark: someone watches the queue (Queue.watch) for the next ARGV[2] milliseconds, or
-- longer if another watcher said so.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, milliseconds.
-- Returns: 1.

local K_WATCHED = base .. 'watched'
local ms = tonumber(ARGV[2])
if redis.call('PTTL', K_WATCHED) < ms then
  redis.call('SET', K_WATCHED, '1', 'PX', ms)
end
return 1
