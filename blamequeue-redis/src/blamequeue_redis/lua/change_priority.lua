-- change_priority: sets the priority of a waiting job.  Assembled as the queue prelude,
-- job_edit.lua, this file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, the new priority.
-- Applies to a pending or parked job.  A due one's `ready` entry takes the new score (its
--   member, due time and enqueue order, stays); a delayed or parked one gets it from its hash
--   when it is filed in `ready`.  Any other job is left as it is.
-- Returns: {applied (1/0), state before, row after (JSON)}; '' when this queue has no such job.

if was ~= 'pending' and was ~= 'parked' then return edited(false) end
local prio = itext(tonumber(ARGV[3]))
redis.call('HSET', key, 'priority', prio)
if was == 'pending' then
  -- XX: only where it is filed (a delayed job is not).
  redis.call('ZADD', K_READY, 'XX', ready_score(prio, f[18]), ready_member(id, f[7], f[15], f[18]))
end
f[3] = prio
return edited(true)
