-- lease_limited: lease under fleet-wide limits (group concurrency, rate).  After the queue
-- prelude.  How it walks and counts: blamequeue_redis._limits_script.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now, limit, token, expires_at, group_concurrency ('' = none), rate_max ('' =
--   none), rate_per_seconds.
-- Returns: the leased rows (JSON, '' for none) in lease order.
--
-- ${SCAN_MAX} is filled in at load from blamequeue_redis._limits_script.

local now, limit, token, expires = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local nnow = tonumber(now)
local cap = tonumber(ARGV[6])
local rate_max, rate_per = tonumber(ARGV[7]), tonumber(ARGV[8])
local K_BUCKET = base .. 'bucket'
local tokens
if rate_max then
  local b = redis.call('HMGET', K_BUCKET, 'tokens', 'at')
  tokens = tonumber(b[1])
  local at = tonumber(b[2])
  if not tokens then
    tokens, at = rate_max, nnow
  elseif nnow > at then
    tokens = math.min(rate_max, tokens + (nnow - at) * rate_max / rate_per)
    at = nnow
  end
  redis.call('HSET', K_BUCKET, 'tokens', string.format('%.17g', tokens),
    'at', string.format('%.17g', at))
  -- The epsilon absorbs float error: 0.1 s at 10/s refills 0.9999... tokens, not 1.
  limit = math.min(limit, math.floor(tokens + 1e-9))
end
if limit < 1 then return '' end
promote_due(now)
local busy = {}
if cap then
  for _, id in ipairs(redis.call('ZRANGE', K_INFLIGHT, 0, -1)) do
    local g = redis.call('HGET', jkey(id), 'group_key')
    if g then busy[g] = (busy[g] or 0) + 1 end
  end
end
local out = {}
local inflight = {}
local skipped = 0
local CH = 100
while #out < limit and skipped <= ${SCAN_MAX} do
  local members = redis.call('ZRANGE', K_READY, skipped, skipped + CH - 1)
  if #members == 0 then break end
  local gone = {}
  for _, m in ipairs(members) do
    if #out >= limit then break end
    local id = string.sub(m, 33)
    local key = jkey(id)
    local f = redis.call('HMGET', key, unpack(ROW))
    if f[1] ~= 'pending' then
      gone[#gone + 1] = m
    elseif tonumber(f[7]) > nnow then
      gone[#gone + 1] = m
      pend(id, f[7], f[3], f[15], now, f[18])
    else
      local g = f[16]
      if cap and g and (busy[g] or 0) >= cap then
        skipped = skipped + 1
      else
        if g then busy[g] = (busy[g] or 0) + 1 end
        gone[#gone + 1] = m
        take(id, key, f, token, expires, inflight, out)
      end
    end
  end
  if #gone > 0 then bulk('ZREM', K_READY, gone) end
end
flush()
bulk('ZADD', K_INFLIGHT, inflight)
if rate_max then redis.call('HINCRBYFLOAT', K_BUCKET, 'tokens', -#out) end
return encode(out)
