-- promote: makes a delayed job due now.  Assembled as the queue prelude, job_edit.lua, this
-- file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, now.
-- Applies to a pending job whose available_at is later than now: due at now, filed in
--   `ready` (consumers woken); any other job is left as it is.
-- Returns: {applied (1/0), state before, row after (JSON)}; '' when this queue has no such job.

local now = ARGV[3]
if was ~= 'pending' or tonumber(f[7]) <= tonumber(now) then return edited(false) end
unpend(id, f[7], f[15], f[18])
f[7] = now
repend(now)
return edited(true)
