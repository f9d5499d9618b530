-- The prelude of every per-queue script: the queue's keys and the helpers its transitions
-- share.  Not a script of its own: blamequeue_redis._scripts puts it before each one's text.
--
-- KEYS[1]: the queue's `ready` zset.  It routes the call to the right node of a cluster; the
--   queue's other keys are built on ARGV[1] and share its hash tag, hence its slot.
-- ARGV[1]: the queue's key base.  Each script's own arguments follow.
--
-- f[i] below indexes ROW (a job's fields as HMGET returns them): 1 state, 2 payload,
-- 3 priority, 4 attempts, 5 max_attempts, 6 created_at, 7 available_at, 8 classification,
-- 9 trace_id, 10 last_error, 11 meta, 12 flow_id, 13 depends_on, 14 finished_at, 15 seq,
-- 16 group_key, 17 result, 18 lifo ('1', or false for a job enqueued without lifo).
--
-- ${ROW_FIELDS} (quoted, comma-separated) and ${WAKE_TOKENS} are filled in at load from
-- blamequeue_redis._scripts.

local base = ARGV[1]
-- KEYS[1] is the ready zset (it routes the call on a cluster); the queue's other keys share
-- its base and hash tag, hence its slot.
local K_READY, K_DELAYED, K_INFLIGHT = KEYS[1], base .. 'delayed', base .. 'inflight'
local K_DONE, K_DEAD, K_PARKED = base .. 'done', base .. 'dead', base .. 'parked'
local K_SEQ, K_SIGNAL = base .. 'seq', base .. 'signal'
local K_CANCELLED = base .. 'cancelled'
local ROW = {${ROW_FIELDS}}
local WAKE_TOKENS = ${WAKE_TOKENS}

local function jkey(id) return base .. 'job:' .. id end

-- The per-state index of the queue (inspection's listing order): zset `st:<state>`, score
-- seq, member id.  Every state change of a job goes through move().
local function skey(state) return base .. 'st:' .. state end

-- Unique jobs: the key string `unique:<key>` names the job that took the key.  Whether that
-- job still holds it is checked by ENQUEUE_UNIQUE itself, so no transition has to release it;
-- the string is dropped with its job's hash (delete_job), so a key without a TTL lives no
-- longer than the job that took it.
local function release_unique(id, uk)
  if uk and redis.call('GET', base .. 'unique:' .. uk) == id then
    redis.call('DEL', base .. 'unique:' .. uk)
  end
end

local function move(id, seq, from, to)
  if from then redis.call('ZREM', skey(from), id) end
  if to then redis.call('ZADD', skey(to), seq, id) end
end

-- move() for a batch's jobs (a lease's, a settlement's), done by flush(): one ZREM and one
-- ZADD per state zset for the lot instead of one each per job.  Only for jobs this script
-- does not look up in those zsets again before it flushes.
local state_rems, state_adds = {}, {}
local function list_at(lists, key)
  local list = lists[key]
  if not list then
    list = {}
    lists[key] = list
  end
  return list
end
local function move_later(id, seq, from, to)
  local rems = list_at(state_rems, from)
  rems[#rems + 1] = id
  local adds = list_at(state_adds, to)
  adds[#adds + 1] = seq
  adds[#adds + 1] = id
end

-- Run `cmd key args...` in chunks (Lua's unpack is bounded): one call per chunk instead of
-- one per job.  CHUNK is even, so score/member pairs never split.
local CHUNK = 4000
local function bulk(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = math.min(i + CHUNK - 1, n)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- 16 hex digits that sort bytewise like the double they encode (memoised: a batch shares
-- its times).
local hexcache = {}
local function hextime(t)
  local hex = hexcache[t]
  if hex then return hex end
  local b = {string.byte(struct.pack('>d', tonumber(t)), 1, 8)}
  if b[1] < 128 then
    b[1] = b[1] + 128
  else
    for i = 1, 8 do b[i] = 255 - b[i] end
  end
  hex = string.format('%02x%02x%02x%02x%02x%02x%02x%02x',
    b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
  hexcache[t] = hex
  return hex
end

-- An integer as Redis stores it, memoised (a batch shares its priorities): Redis 7.0 spells
-- a Lua number passed to a command with "%.17g", several times the cost of "%d".
local itexts = {}
local function itext(x)
  local text = itexts[x]
  if text then return text end
  text = string.format('%d', x)
  itexts[x] = text
  return text
end

-- Pending jobs are filed in `ready` / `delayed` in bulk by flush().
local ready_adds, delayed_adds = {}, {}
-- Jobs this script filed as delayed (see signal()).
local delayed_filed = 0

-- A job's place in `ready`.  Score: -priority, or -priority - 0.5 for a lifo job (exact in a
-- double), so the lifo jobs of a priority come just before its other jobs and after those of
-- the priority above.  Member: 16 hex digits of available_at made sortable, 16 of seq, the
-- id; a lifo job's 32 digits are flipped (each d to 15 - d), so the latest due, then the
-- latest enqueued, comes first.  Either way the id starts at the member's 33rd character.
local FLIP = {}
for d = 0, 15 do FLIP[string.format('%x', d)] = string.format('%x', 15 - d) end
local function ready_member(id, avail, seq, lifo)
  local key = hextime(avail) .. string.format('%016x', tonumber(seq))
  if lifo then key = string.gsub(key, '%x', FLIP) end
  return key .. id
end
local function ready_score(prio, lifo)
  if lifo then return string.format('%.1f', -0.5 - tonumber(prio)) end
  return itext(0 - tonumber(prio))
end

local function make_ready(id, avail, prio, seq, lifo)
  local n = #ready_adds
  ready_adds[n + 1] = ready_score(prio, lifo)
  ready_adds[n + 2] = ready_member(id, avail, seq, lifo)
end

-- File a pending job due at avail; 1 when it is due by now (ready), else 0 (delayed).  `lifo`:
-- its lifo field (truthy for a lifo job), which a delayed job gets back when it comes due.
local function pend(id, avail, prio, seq, now, lifo)
  -- The same string (due at enqueue, the common case) needs no parsing.
  if avail == now or tonumber(avail) <= tonumber(now) then
    make_ready(id, avail, prio, seq, lifo)
    return 1
  end
  local n = #delayed_adds
  delayed_adds[n + 1] = avail
  delayed_adds[n + 2] = id
  delayed_filed = delayed_filed + 1
  return 0
end

-- Take a pending job (due or delayed) out of `ready` and `delayed`, where pend() filed it:
-- `avail`, `seq`, `lifo` as its hash holds them.  Its entry in `st:pending` stays (callers move it).
local function unpend(id, avail, seq, lifo)
  redis.call('ZREM', K_DELAYED, id)
  redis.call('ZREM', K_READY, ready_member(id, avail, seq, lifo))
end

local function flush()
  for state, ids in pairs(state_rems) do bulk('ZREM', skey(state), ids) end
  for state, adds in pairs(state_adds) do bulk('ZADD', skey(state), adds) end
  state_rems, state_adds = {}, {}
  if #ready_adds > 0 then
    bulk('ZADD', K_READY, ready_adds)
    ready_adds = {}
  end
  if #delayed_adds > 0 then
    bulk('ZADD', K_DELAYED, delayed_adds)
    delayed_adds = {}
  end
end

-- Move the delayed jobs due by `now` to `ready` (what a lease does first).
local function promote_due(now)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now)
  if #due == 0 then return end
  redis.call('ZREMRANGEBYSCORE', K_DELAYED, '-inf', now)
  for _, id in ipairs(due) do
    local f = redis.call('HMGET', jkey(id), 'priority', 'available_at', 'seq', 'lifo')
    if f[1] then make_ready(id, f[2], f[1], f[3], f[4]) end
  end
  flush()
end

-- Wake up to `count` idle consumers (each BLPOPs one token).  A script that filed a delayed
-- job wakes one even when nothing is due now: that consumer's wait then ends at the job's due
-- time (next_due.lua) instead of at its next poll.
local function signal(count)
  if count <= 0 and delayed_filed > 0 then count = 1 end
  if count <= 0 then return end
  if count > WAKE_TOKENS then count = WAKE_TOKENS end
  local tokens = {}
  for i = 1, count do tokens[i] = '1' end
  redis.call('LPUSH', K_SIGNAL, unpack(tokens))
  redis.call('LTRIM', K_SIGNAL, 0, WAKE_TOKENS - 1)
end

local function row(id, f)
  local r = {id}
  for i = 1, #ROW do r[i + 1] = f[i] end
  return r
end

-- Lease one pending job (`f`: its ROW fields) under `token` until `expires`: inflight, one
-- attempt more; its row goes to `out`, its expiry and id to `inflight` (the inflight zset's
-- bulk ZADD).
local function take(id, key, f, token, expires, inflight, out)
  local attempts = itext(tonumber(f[4]) + 1)
  redis.call('HSET', key, 'state', 'inflight', 'attempts', attempts, 'token', token,
    'expires_at', expires)
  move_later(id, f[15], 'pending', 'inflight')
  inflight[#inflight + 1] = expires
  inflight[#inflight + 1] = id
  f[1] = 'inflight'
  f[4] = attempts
  out[#out + 1] = row(id, f)
end

local function encode(rows)
  if #rows == 0 then return '' end
  return cjson.encode(rows)
end

-- Tell result waiters (pub/sub, channel `<base>settled`) which jobs just ended, one message
-- per call.  pcall: a user the ACL denies channels still settles (waiters then poll).
local function announce(ids)
  if #ids > 0 then redis.pcall('PUBLISH', base .. 'settled', table.concat(ids, ' ')) end
end

-- Delete a job's hash and indexes (not its membership in the state zsets: callers do that).
local function delete_job(id, flow_id)
  local st, uk = unpack(redis.call('HMGET', jkey(id), 'state', 'unique_key'))
  if st then redis.call('ZREM', skey(st), id) end
  release_unique(id, uk)
  if flow_id then redis.call('ZREM', base .. 'flow:' .. flow_id, id) end
  redis.call('DEL', jkey(id), base .. 'deps:' .. id)
end
