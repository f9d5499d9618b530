-- wait_mark: starts the mark of an idle consumer's blocking wait.  After the queue prelude.
--
-- Leasing in the same exchange as the wait: the consumer's connection sends, in one write,
-- wait_mark, `BLMOVE <signal> <mark> LEFT RIGHT <timeout>`, lease_after_wait.  Redis holds the
-- last command until the BLMOVE returns, then runs it at once: a woken consumer gets its jobs
-- without a round trip of its own.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, the mark key (`<base>wake:<token>`), its TTL in milliseconds.
-- Starts the mark list with the server's time (so that lease_after_wait knows how long the
-- wait took); the BLMOVE appends the wake token it took, if any.  The TTL outlives the wait:
-- a consumer that dies meanwhile leaves nothing behind for good.
-- Returns: 1.

local t = redis.call('TIME')
redis.call('DEL', ARGV[2])
redis.call('RPUSH', ARGV[2], t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
redis.call('PEXPIRE', ARGV[2], ARGV[3])
return 1
