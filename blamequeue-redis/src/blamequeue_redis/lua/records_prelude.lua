-- The prelude of every records script (shared records, Capabilities.records): the helpers
-- they share.  Not a script of its own: blamequeue_redis._records_script puts it before each
-- one's text.  Key layout: that module's docstring.
--
-- KEYS[1]: the kind's `R:keys` zset (it routes the call on a cluster).
-- ARGV[1]: R, the kind's key base.  Each script's own arguments follow.

local base = ARGV[1]
local function drop(key)
  redis.call('DEL', base .. ':v:' .. key, base .. ':t:' .. key)
  redis.call('ZREM', base .. ':keys', key)
  redis.call('ZREM', base .. ':exp', key)
end
-- Whether the record of key is live; an expired one is deleted on the way.
local function live(key, now)
  local h = base .. ':v:' .. key
  local x = redis.call('HGET', h, 'x')
  if x and tonumber(x) <= tonumber(now) then
    drop(key)
    return false
  end
  return redis.call('EXISTS', h) == 1
end
local function row(key)
  local all = redis.call('HGETALL', base .. ':v:' .. key)
  local v, x, c = false, '', {}
  for i = 1, #all, 2 do
    local f = all[i]
    if f == 'v' then v = all[i + 1]
    elseif f == 'x' then x = all[i + 1]
    elseif string.sub(f, 1, 2) == 'c:' then
      c[#c + 1] = string.sub(f, 3)
      c[#c + 1] = all[i + 1]
    end
  end
  return {key, v, x, c}
end
local function expire(key, at)
  local h = base .. ':v:' .. key
  if at == '' then
    redis.call('HDEL', h, 'x')
    redis.call('ZREM', base .. ':exp', key)
  else
    redis.call('HSET', h, 'x', at)
    redis.call('ZADD', base .. ':exp', at, key)
  end
end
