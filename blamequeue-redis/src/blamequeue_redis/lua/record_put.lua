-- record_put: writes a record's value.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, key, value, now, expires_at ('' = none), if_absent ('1' or '').
-- Returns: 1 when it wrote, 0 when if_absent found a live record.

local key = ARGV[2]
if live(key, ARGV[4]) and ARGV[6] == '1' then return 0 end
redis.call('HSET', base .. ':v:' .. key, 'e', '1', 'v', ARGV[3])
expire(key, ARGV[5])
redis.call('ZADD', KEYS[1], 0, key)
return 1
