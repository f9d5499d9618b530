-- prune: the retention limits beyond retain_done on one queue, within a budget (the dead jobs
-- finished before a cutoff, and the least recently finished beyond a count).  After the queue
-- prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, dead_cutoff, dead_keep, done_keep (each '' for no limit), budget.
-- Returns: {pruned, more (1 when the budget ran out)}.
-- The jobs it deletes are announced on `<base>settled` (result waiters).

local dead_cutoff, budget = ARGV[2], tonumber(ARGV[5])
local dead_keep, done_keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local pruned, more = {}, 0

-- Each limit takes the oldest members of a zset scored by finished_at, so the dead jobs to
-- delete are the oldest max(too old, too many).
local dead = 0
if dead_cutoff ~= '' then dead = redis.call('ZCOUNT', K_DEAD, '-inf', '(' .. dead_cutoff) end
if dead_keep then dead = math.max(dead, redis.call('ZCARD', K_DEAD) - dead_keep) end
if dead > budget then dead, more = budget, 1 end
if dead > 0 then
  for _, id in ipairs(redis.call('ZRANGE', K_DEAD, 0, dead - 1)) do
    pruned[#pruned + 1] = id
    delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
  end
  redis.call('ZREMRANGEBYRANK', K_DEAD, 0, dead - 1)
end

-- Done and cancelled jobs are one pool: the oldest of both zsets, merged by score.
if done_keep then
  local over = redis.call('ZCARD', K_DONE) + redis.call('ZCARD', K_CANCELLED) - done_keep
  if over > budget then over, more = budget, 1 end
  if over > 0 then
    local done = redis.call('ZRANGE', K_DONE, 0, over - 1, 'WITHSCORES')
    local gone = redis.call('ZRANGE', K_CANCELLED, 0, over - 1, 'WITHSCORES')
    local i, j, taken_done, taken_gone = 1, 1, 0, 0
    for _ = 1, over do
      local id
      if j > #gone or (i <= #done and tonumber(done[i + 1]) <= tonumber(gone[j + 1])) then
        id, i, taken_done = done[i], i + 2, taken_done + 1
      else
        id, j, taken_gone = gone[j], j + 2, taken_gone + 1
      end
      pruned[#pruned + 1] = id
      delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
    end
    if taken_done > 0 then redis.call('ZREMRANGEBYRANK', K_DONE, 0, taken_done - 1) end
    if taken_gone > 0 then redis.call('ZREMRANGEBYRANK', K_CANCELLED, 0, taken_gone - 1) end
  end
end

announce(pruned)
return {#pruned, more}
