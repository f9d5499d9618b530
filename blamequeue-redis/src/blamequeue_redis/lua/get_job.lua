-- get_job: one job's row.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, job id.
-- Returns: the job's row in any state (JSON); '' when this queue has no such job.

local id = ARGV[2]
local f = redis.call('HMGET', jkey(id), unpack(ROW))
if not f[1] then return '' end
return cjson.encode(row(id, f))
