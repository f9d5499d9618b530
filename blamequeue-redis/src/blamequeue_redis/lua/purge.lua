-- purge: deletes the queue's live and retained jobs, within a budget.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, budget.
-- Deletes up to `budget` live, retained done and cancelled jobs.
-- Returns: {live jobs deleted, more (1 when the budget ran out)}.

local budget = tonumber(ARGV[2])
local live = 0
local function wipe(zkey, offset, counts)
  if budget <= 0 then return end
  local members = redis.call('ZRANGE', zkey, 0, budget - 1)
  for _, m in ipairs(members) do
    local id = string.sub(m, offset)
    delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
  end
  if #members > 0 then redis.call('ZREMRANGEBYRANK', zkey, 0, #members - 1) end
  budget = budget - #members
  if counts then live = live + #members end
end
wipe(K_READY, 33, true)
wipe(K_DELAYED, 1, true)
wipe(K_INFLIGHT, 1, true)
if budget > 0 then
  local parked = redis.call('SPOP', K_PARKED, budget)
  for _, id in ipairs(parked) do
    delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
  end
  budget = budget - #parked
  live = live + #parked
end
wipe(K_DONE, 1, false)
wipe(K_CANCELLED, 1, false)
local more = 0
if budget <= 0 then more = 1 end
return {live, more}
