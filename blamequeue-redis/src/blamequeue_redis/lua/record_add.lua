-- record_add: adds to a record's counters.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, key, now, expires_at ('' = keep), once ('' = none), then name, delta pairs.
-- Returns: {applied (1/0), row}; a `once` token the record already applied applies nothing.

local key = ARGV[2]
live(key, ARGV[3])
if ARGV[5] ~= '' and redis.call('SADD', base .. ':t:' .. key, ARGV[5]) == 0 then
  return {0, row(key)}
end
local h = base .. ':v:' .. key
redis.call('HSET', h, 'e', '1')
for i = 6, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', h, 'c:' .. ARGV[i], ARGV[i + 1])
end
if ARGV[4] ~= '' then expire(key, ARGV[4]) end
redis.call('ZADD', KEYS[1], 0, key)
return {1, row(key)}
