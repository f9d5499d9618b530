-- counts: the queue's per-state counts.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base.
-- Returns: {pending, inflight, parked, done, dead, cancelled}.

return {redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_DELAYED),
  redis.call('ZCARD', K_INFLIGHT), redis.call('SCARD', K_PARKED),
  redis.call('ZCARD', K_DONE), redis.call('ZCARD', K_DEAD), redis.call('ZCARD', K_CANCELLED)}
