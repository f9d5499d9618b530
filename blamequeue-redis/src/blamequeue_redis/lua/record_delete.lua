-- record_delete: deletes a record.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, key.
-- Returns: 1 when a record was stored, else 0.

local existed = redis.call('EXISTS', base .. ':v:' .. ARGV[2])
drop(ARGV[2])
return existed
