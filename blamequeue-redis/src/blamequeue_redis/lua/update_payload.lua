-- update_payload: replaces the payload of a waiting job.  Assembled as the queue prelude,
-- job_edit.lua, this file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id, the new payload, then the place it was sealed for: flow_id and meta,
--   each '' for none or '=' followed by the value.  (The queue is this script's own.)
-- Applies to a pending or parked job whose flow_id and meta are those; any other job is left
--   as it is.
-- Returns: {applied (1/0), state before, row after (JSON)}; '' when this queue has no such job.

local function spelled(value)
  if value then return '=' .. value end
  return ''
end
if (was ~= 'pending' and was ~= 'parked') or spelled(f[12]) ~= ARGV[4]
    or spelled(f[11]) ~= ARGV[5] then
  return edited(false)
end
redis.call('HSET', key, 'payload', ARGV[3])
f[2] = ARGV[3]
return edited(true)
