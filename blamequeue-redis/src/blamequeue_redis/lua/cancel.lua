-- cancel: cancels one job.  After the queue prelude and flow_release.lua.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, now.
-- Moves a pending (due or delayed), inflight or parked job to 'cancelled' (finished_at =
-- now), out of every index a lease, the sweep or size() reads; its token stays, fencing the
-- old lease (settle wants 'inflight') and telling extend to report the cancel.  A flow job's
-- parked dependants follow their on_dependency_failure (fall()) in this same script; the ones
-- that fail with it are announced on `<base>settled` (result waiters).
-- Returns: {1, row (JSON)} when it cancelled the job, {0, row (JSON)} when the job had already
--   finished (left as it is), '' when this queue has no such job.

local id, now = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
if not f[1] then return '' end
local was = f[1]
if was == 'pending' then
  unpend(id, f[7], f[15], f[18])
elseif was == 'inflight' then
  redis.call('ZREM', K_INFLIGHT, id)
elseif was == 'parked' then
  -- Its entries in deps:<dep> stay: a release only moves jobs still parked.
  redis.call('SREM', K_PARKED, id)
else
  return {0, cjson.encode(row(id, f))}
end
redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now)
move(id, f[15], was, 'cancelled')
redis.call('ZADD', K_CANCELLED, now, id)
if f[12] then
  local fallen = {}
  local woken = fall(id, now, now, fallen)
  flush()
  signal(woken)
  announce(fallen)
end
f[1], f[14] = 'cancelled', now
return {1, cjson.encode(row(id, f))}
