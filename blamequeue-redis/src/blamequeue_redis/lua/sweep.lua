-- sweep: expired leases back to pending (or dead when their attempts are spent), old done
-- and cancelled jobs deleted.  After the queue prelude and flow_release.lua.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now, expired_error, cutoff (prune done jobs finished before it), budget.
-- Returns: {expired rows (JSON), dead rows (JSON), pruned count, more (1: a budget ran out)}.
-- A flow job it dead-letters makes the jobs parked behind it follow their
-- on_dependency_failure (fall()), in this same script.
-- The jobs it dead-letters (those dependants too) or prunes are announced on `<base>settled`
-- (result waiters).

local now, err, cutoff, budget = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local expired, dead = {}, {}
local woken = 0
local ids = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', now, 'LIMIT', 0, budget)
bulk('ZREM', K_INFLIGHT, ids)
local buried, fallen = {}, {}
for _, id in ipairs(ids) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, unpack(ROW))
  if f[1] == 'inflight' then
    if tonumber(f[4]) >= tonumber(f[5]) then
      redis.call('HSET', key, 'state', 'dead', 'last_error', err, 'finished_at', now)
      move(id, f[15], 'inflight', 'dead')
      buried[#buried + 1] = now
      buried[#buried + 1] = id
      f[1], f[10], f[14] = 'dead', err, now
      dead[#dead + 1] = row(id, f)
      if f[12] then woken = woken + fall(id, now, now, fallen) end
    else
      redis.call('HSET', key, 'state', 'pending', 'available_at', now)
      move(id, f[15], 'inflight', 'pending')
      woken = woken + pend(id, now, f[3], f[15], now, f[18])
      f[1], f[7] = 'pending', now
      expired[#expired + 1] = row(id, f)
    end
  end
end
bulk('ZADD', K_DEAD, buried)
flush()
local old = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', '(' .. cutoff, 'LIMIT', 0, budget)
for _, id in ipairs(old) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
bulk('ZREM', K_DONE, old)
local gone = redis.call('ZRANGEBYSCORE', K_CANCELLED, '-inf', '(' .. cutoff, 'LIMIT', 0, budget)
for _, id in ipairs(gone) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
bulk('ZREM', K_CANCELLED, gone)
signal(woken)
local ended = {}
for i = 2, #buried, 2 do ended[#ended + 1] = buried[i] end
for _, id in ipairs(fallen) do ended[#ended + 1] = id end
for _, id in ipairs(old) do ended[#ended + 1] = id end
announce(ended)
local more = 0
if #ids >= budget or #old >= budget or #gone >= budget then more = 1 end
return {encode(expired), encode(dead), #old + #gone, more}
