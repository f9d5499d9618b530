-- dlq_purge: deletes the queue's dead jobs, within a budget.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, budget.
-- Returns: {deleted, more (1 when the budget ran out)}.

local budget = tonumber(ARGV[2])
local ids = redis.call('ZRANGE', K_DEAD, 0, budget - 1)
for _, id in ipairs(ids) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
if #ids > 0 then redis.call('ZREMRANGEBYRANK', K_DEAD, 0, #ids - 1) end
local more = 0
if #ids >= budget then more = 1 end
return {#ids, more}
