-- worker_beat: stores a worker's record and heartbeat.  A registry script: no prelude.
--
-- KEYS: the records hash, the heartbeats zset (one hash tag, one slot).
-- ARGV: worker id, heartbeat_at, record (JSON).
-- Returns: nothing (nil).

redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
