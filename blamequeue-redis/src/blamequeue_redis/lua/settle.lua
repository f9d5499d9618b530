-- settle: applies a batch of settlements.  After the queue prelude and flow_release.lua.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now, the settlements as one JSON array of [id, token, outcome, at, error
--   (false: none), keep (true/false), result (false: none)].
-- Returns: one '1' (applied) or '0' (stale) per settlement, as one string.
-- A flow job that ends done releases the jobs parked behind it that are then free; one that
-- ends dead makes them follow their on_dependency_failure (fall()).
-- The ids of the jobs that ended (done or dead, and the dependants that failed with them) are
-- published, space-separated, on the queue's channel `<base>settled` (one message per call),
-- for result waiters.

local now = ARGV[2]
local items = cjson.decode(ARGV[3])
local res = {}
local woken = 0
local settled, done, dead = {}, {}, {}

-- A failed attempt's error replaces the job's last one; none clears it.
local function set_error(key, err)
  if type(err) == 'string' then
    redis.call('HSET', key, 'last_error', err)
  else
    redis.call('HDEL', key, 'last_error')
  end
end

local ended = {}

for j, item in ipairs(items) do
  local id, token, outcome, at, err, keep = item[1], item[2], item[3], item[4], item[5], item[6]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'state', 'token', 'flow_id', 'priority', 'seq', 'attempts',
    'lifo')
  if f[1] ~= 'inflight' or f[2] ~= token then
    res[j] = '0'
  else
    res[j] = '1'
    settled[#settled + 1] = id
    if outcome == 'done' then
      local waiting = nil
      if f[3] then
        local dkey = base .. 'deps:' .. id
        waiting = redis.call('SMEMBERS', dkey)
        redis.call('DEL', dkey)
      end
      if keep then
        redis.call('HSET', key, 'state', 'done', 'finished_at', at)
        if type(item[7]) == 'string' then redis.call('HSET', key, 'result', item[7]) end
        move_later(id, f[5], 'inflight', 'done')
        done[#done + 1] = at
        done[#done + 1] = id
      else
        delete_job(id, f[3])
      end
      if waiting then woken = woken + release(waiting, at, now) end
      ended[#ended + 1] = id
    elseif outcome == 'dead' then
      redis.call('HSET', key, 'state', 'dead', 'finished_at', at)
      move(id, f[5], 'inflight', 'dead')
      set_error(key, err)
      dead[#dead + 1] = at
      dead[#dead + 1] = id
      ended[#ended + 1] = id
      if f[3] then woken = woken + fall(id, at, now, ended) end
    elseif outcome == 'retry' then
      redis.call('HSET', key, 'state', 'pending', 'available_at', at)
      move(id, f[5], 'inflight', 'pending')
      set_error(key, err)
      woken = woken + pend(id, at, f[4], f[5], now, f[7])
    else -- release: the interrupted attempt is given back
      local attempts = tonumber(f[6]) - 1
      if attempts < 0 then attempts = 0 end
      redis.call('HSET', key, 'state', 'pending', 'available_at', at, 'attempts', itext(attempts))
      move(id, f[5], 'inflight', 'pending')
      if type(err) == 'string' then redis.call('HSET', key, 'last_error', err) end
      woken = woken + pend(id, at, f[4], f[5], now, f[7])
    end
  end
end
bulk('ZREM', K_INFLIGHT, settled)
bulk('ZADD', K_DONE, done)
bulk('ZADD', K_DEAD, dead)
flush()
signal(woken)
announce(ended)
return table.concat(res)
