-- list_jobs: one page of the queue's jobs.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, states to visit in order (space-separated), seq after which the first state
--   starts (-1: from its start), limit.
-- Returns: rows (JSON, '' for none) of up to limit + 1 jobs, by state then seq (the
--   `st:<state>` zsets): the caller keeps limit and knows whether more follow.  A page costs
--   O(log n + limit) however deep it is.

local after, want = ARGV[3], tonumber(ARGV[4]) + 1
local out = {}
for state in string.gmatch(ARGV[2], '%S+') do
  if #out >= want then break end
  local ids = redis.call('ZRANGEBYSCORE', skey(state), '(' .. after, '+inf',
    'LIMIT', 0, want - #out)
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', jkey(id), unpack(ROW))
    if f[1] then out[#out + 1] = row(id, f) end
  end
  after = '-inf'
end
return encode(out)
