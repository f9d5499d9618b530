-- Fragment shared by dlq_retry.lua and rerun.lua, placed between the queue prelude (and
-- job_edit.lua) and their own text: revive(id, key, f, now).
--
-- Moves a done, dead or cancelled job (`f`: its ROW fields, changed to match) back to pending,
-- due at `now` with no attempts: out of its finished state's zset (retention, the DLQ), without
-- finished_at, result, lease token or unique key; last_error stays.  Filed in `ready` or
-- `delayed`, consumers woken as enqueue wakes them.  A done flow job's parked dependants wait
-- for it again: settle dropped its `deps:<id>` set when it was done, so it is built again from
-- the flow's parked jobs that depend on it.

local FINISHED = {done = K_DONE, dead = K_DEAD, cancelled = K_CANCELLED}

local function revive(id, key, f, now)
  local was = f[1]
  redis.call('ZREM', FINISHED[was], id)
  redis.call('HSET', key, 'state', 'pending', 'attempts', '0', 'available_at', now)
  move(id, f[15], was, 'pending')
  release_unique(id, redis.call('HGET', key, 'unique_key'))  -- back without its unique key
  redis.call('HDEL', key, 'finished_at', 'result', 'token', 'expires_at', 'unique_key',
    'unique_until')
  if was == 'done' and f[12] then
    local waiting, spaced = {}, ' ' .. id .. ' '
    for _, cid in ipairs(redis.call('ZRANGE', base .. 'flow:' .. f[12], 0, -1)) do
      local c = redis.call('HMGET', jkey(cid), 'state', 'depends_on')
      if c[1] == 'parked' and string.find(' ' .. (c[2] or '') .. ' ', spaced, 1, true) then
        waiting[#waiting + 1] = cid
      end
    end
    bulk('SADD', base .. 'deps:' .. id, waiting)
  end
  local woken = pend(id, now, f[3], f[15], now, f[18])
  flush()
  signal(woken)
  f[1], f[4], f[7], f[14], f[17] = 'pending', '0', now, false, false
end
