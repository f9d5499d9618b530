-- size: how many jobs the queue holds.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base.
-- Returns: pending (delayed included) + inflight + parked.

return redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_DELAYED)
  + redis.call('ZCARD', K_INFLIGHT) + redis.call('SCARD', K_PARKED)
