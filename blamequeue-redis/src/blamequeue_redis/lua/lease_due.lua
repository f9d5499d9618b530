-- Fragment shared by lease.lua and lease_after_wait.lua, placed between the queue prelude and
-- their own text: lease_due(now, limit, token, expires).
--
-- Leases up to `limit` due jobs at `now` (a decimal string) under `token` until `expires`:
-- promotes the delayed jobs that came due, then takes the ready ones in lease order.
-- Returns the leased rows (a Lua table, for encode()).

local function lease_due(now, limit, token, expires)
  local nnow = tonumber(now)
  promote_due(now)
  local out = {}
  local inflight = {}
  while #out < limit do
    local members = redis.call('ZRANGE', K_READY, 0, limit - #out - 1)
    if #members == 0 then break end
    redis.call('ZREMRANGEBYRANK', K_READY, 0, #members - 1)
    for _, m in ipairs(members) do
      local id = string.sub(m, 33)
      local key = jkey(id)
      local f = redis.call('HMGET', key, unpack(ROW))
      if f[1] == 'pending' then
        if tonumber(f[7]) > nnow then
          -- Due by a clock ahead of ours (another process): not yet for us.
          pend(id, f[7], f[3], f[15], now, f[18])
        else
          take(id, key, f, token, expires, inflight, out)
        end
      end
    end
  end
  flush()
  bulk('ZADD', K_INFLIGHT, inflight)
  return out
end
