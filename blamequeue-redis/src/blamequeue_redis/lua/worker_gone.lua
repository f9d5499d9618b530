-- worker_gone: deletes a worker's record and heartbeat.  A registry script: no prelude.
--
-- KEYS: the records hash, the heartbeats zset (one hash tag, one slot).
-- ARGV: worker id.
-- Returns: nothing (nil).

redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
