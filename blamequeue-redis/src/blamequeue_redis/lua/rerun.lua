-- rerun: a finished job back to pending.  Assembled as the queue prelude, job_edit.lua,
-- revive.lua, this file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, now.
-- Applies to a done, dead or cancelled job: back to pending, due now, attempts 0, as
--   dlq_retry moves a dead one (revive()); a live job is left as it is.
-- Returns: {applied (1/0), state before, row after (JSON)}; '' when this queue has no such job.

if was ~= 'done' and was ~= 'dead' and was ~= 'cancelled' then return edited(false) end
revive(id, key, f, ARGV[3])
return edited(true)
