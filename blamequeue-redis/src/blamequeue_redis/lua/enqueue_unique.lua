-- enqueue_unique: enqueue.lua for one job, unless its unique key is held.  Assembled as the
-- queue prelude, this file, then enqueue.lua's text (which stores the job).
--
-- KEYS, ARGV[1] to ARGV[3]: as enqueue.lua, with one job whose optional fields hold
--   unique_key (and unique_until when the key expires).
-- ARGV[4]: the unique key.  ARGV[5]: now.  ARGV[6]: the key's TTL in milliseconds ('' = none).
-- Returns: the id of the job that holds the key (pending or inflight, before its
--   unique_until), storing nothing; else what enqueue.lua returns, `unique:<key>` then naming
--   the new job.
--
-- ${UNIQUE_HOLDING_STATES} is filled in at load (blamequeue.abc's, as `state = true` pairs).

local HOLDING = {${UNIQUE_HOLDING_STATES}}
local ukey = base .. 'unique:' .. ARGV[4]
local holder = redis.call('GET', ukey)
if holder then
  local h = redis.call('HMGET', jkey(holder), 'state', 'unique_key', 'unique_until')
  if HOLDING[h[1]] and h[2] == ARGV[4]
      and (not h[3] or tonumber(h[3]) > tonumber(ARGV[5])) then
    return holder
  end
end
local new_id = cjson.decode(ARGV[3])[1][1]
if redis.call('EXISTS', jkey(new_id)) == 0 then  -- else ENQUEUE's check below refuses it
  if ARGV[6] ~= '' then
    redis.call('SET', ukey, new_id, 'PX', ARGV[6])
  else
    redis.call('SET', ukey, new_id)
  end
end
