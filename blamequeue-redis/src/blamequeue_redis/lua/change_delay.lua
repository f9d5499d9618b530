-- change_delay: sets when a pending job is due.  Assembled as the queue prelude,
-- job_edit.lua, this file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, the new available_at, now.
-- Applies to a pending job (due or delayed): filed again in `ready` or `delayed` by the new
--   time (consumers woken); any other job is left as it is.
-- Returns: {applied (1/0), state before, row after (JSON)}; '' when this queue has no such job.

if was ~= 'pending' then return edited(false) end
unpend(id, f[7], f[15], f[18])
f[7] = ARGV[3]
repend(ARGV[4])
return edited(true)
