-- extend: moves the expiry of each lease still held.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, expires_at, the leases as one JSON array of [id, token].
-- Returns: one '1' (held), '0' (lost) or 'c' (the job was cancelled under this lease: stop
--   the handler) per lease, as one string.

local expires = ARGV[2]
local res = {}
for j, pair in ipairs(cjson.decode(ARGV[3])) do
  local id, token = pair[1], pair[2]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'state', 'token')
  if f[1] == 'inflight' and f[2] == token then
    redis.call('HSET', key, 'expires_at', expires)
    redis.call('ZADD', K_INFLIGHT, expires, id)
    res[j] = '1'
  elseif f[1] == 'cancelled' and f[2] == token then
    res[j] = 'c'
  else
    res[j] = '0'
  end
end
return table.concat(res)
