-- Fragment shared by the job edits (promote.lua, change_delay.lua, change_priority.lua,
-- update_payload.lua, rerun.lua), placed between the queue prelude and each one's own text.
--
-- ARGV[2] is the job's id in each of them.  Reads the job's ROW fields into `f` and its state
-- into `was`, answering '' at once when this queue has no such job; each edit then changes
-- `f` as it changes the hash, and answers edited(applied): {1 (applied) or 0 (nothing
-- changed), the state before, the job's row after (JSON)}.

local id = ARGV[2]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
local was = f[1]
if not was then return '' end

local function edited(applied)
  return {applied and 1 or 0, was, cjson.encode(row(id, f))}
end

-- A pending job's due time changed (f[7] holds the new one): file it again as enqueue would,
-- waking idle consumers as enqueue does (one token too when it is delayed: a consumer waiting
-- for the old due time asks next_due again).
local function repend(now)
  redis.call('HSET', key, 'available_at', f[7])
  local woken = pend(id, f[7], f[3], f[15], now, f[18])
  flush()
  signal(woken)
end
