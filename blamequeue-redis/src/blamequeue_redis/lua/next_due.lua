-- next_due: when the queue's next pending job is due.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now.
-- Returns: `now` when a job is ready (due already: a limit held it back), else the
-- earliest delayed job's available_at (its score in `delayed`), or nil for none.

if redis.call('ZCARD', K_READY) > 0 then return ARGV[2] end
local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
if #first == 0 then return false end
return first[2]
