-- flow_jobs: a flow's jobs in this queue.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, flow id.
-- Returns: the rows (JSON, '' for none) of the flow's jobs still stored in this queue, in
--   enqueue order.

local ids = redis.call('ZRANGE', base .. 'flow:' .. ARGV[2], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), unpack(ROW))
  if f[1] then out[#out + 1] = row(id, f) end
end
return encode(out)
