-- dlq_list: the queue's dead jobs.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, limit (-1: all).
-- Returns: the dead jobs' rows (JSON, '' for none), most recently failed first.

local ids = redis.call('ZREVRANGE', K_DEAD, 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), unpack(ROW))
  if f[1] == 'dead' then out[#out + 1] = row(id, f) end
end
return encode(out)
