"""The Lua scripts of the ``redis`` backend: one script per state transition.

A script runs atomically in Redis, so each transition below is atomic on its own, whatever
other processes do, and a batch (of jobs to enqueue, leases to take, settlements to apply) costs
one round trip.  Every per-queue script gets ``KEYS[1]`` = the queue's ``ready`` key (which
routes the call to the right node of a cluster) and ``ARGV[1]`` = the queue's key base; the
queue's other keys, job hashes and flow indexes are built on that base, so every key a script
touches carries the queue's hash tag and lives in its slot.

Times travel as the decimal strings Python wrote (``repr`` of a float: exact round trip) and
are stored verbatim; Lua only *compares* them (``tonumber`` parses the same double), so no
precision is lost.  Rows go back to Python as one ``cjson`` string (one bulk reply to parse,
whatever the batch).

Leasing order (priority desc, then available_at, then enqueue order) lives in the ``ready``
zset: the score is ``-priority`` (an int32, exact in a double) and members with equal scores
sort bytewise, so the member starts with 16 hex digits of ``available_at`` made sortable
(the IEEE-754 bits, sign-flipped) then 16 hex digits of the queue's enqueue counter, then the
job id.  Jobs not yet due wait in ``delayed`` (scored by ``available_at``); a lease first
promotes the ones that came due.
"""

from __future__ import annotations

import hashlib
from typing import Final

import attrs

from blamequeue.abc import UNIQUE_HOLDING_STATES

__all__ = [
    "CANCEL",
    "COUNTS",
    "DLQ_LIST",
    "DLQ_PURGE",
    "DLQ_RETRY",
    "ENQUEUE",
    "ENQUEUE_UNIQUE",
    "ENQUEUE_WIDTH",
    "EXTEND",
    "FLOW_JOBS",
    "GET_JOB",
    "LEASE",
    "LEASE_AFTER_WAIT",
    "LIST_JOBS",
    "PURGE",
    "ROW_FIELDS",
    "SCRIPTS",
    "SETTLE",
    "SIZE",
    "SWEEP",
    "WAIT_MARK",
    "WAKE_TOKENS",
    "WORKER_BEAT",
    "WORKER_GONE",
    "WORKER_LIST",
    "Script",
]

#: How many values a job's row takes in ENQUEUE's flat array of rows (after its id and payload).
ENQUEUE_WIDTH: Final = 8

#: The most wake-up tokens a queue's signal list holds (each wakes one idle consumer).
WAKE_TOKENS: Final = 16

#: The fields of a job row as scripts return it, after the id (``ROW`` in :data:`PRELUDE`).
ROW_FIELDS: Final = (
    "state",
    "payload",
    "priority",
    "attempts",
    "max_attempts",
    "created_at",
    "available_at",
    "classification",
    "trace_id",
    "last_error",
    "meta",
    "flow_id",
    "depends_on",
    "finished_at",
    "seq",
    "group_key",
    "result",
)


@attrs.frozen
class Script:
    """One Lua script: its name (for messages), its source and its SHA1 (for ``EVALSHA``)."""

    name: str
    source: str
    sha: str = attrs.field(init=False)

    @sha.default
    def _sha(self) -> str:
        return hashlib.sha1(self.source.encode("utf-8")).hexdigest()


_ROW_LUA = ", ".join(f"'{field}'" for field in ROW_FIELDS)

# Helpers shared by every per-queue script.  f[i] below index ROW: 1 state, 2 payload,
# 3 priority, 4 attempts, 5 max_attempts, 6 created_at, 7 available_at, 8 classification,
# 9 trace_id, 10 last_error, 11 meta, 12 flow_id, 13 depends_on, 14 finished_at, 15 seq,
# 16 group_key, 17 result.
PRELUDE: Final = f"""
local base = ARGV[1]
-- KEYS[1] is the ready zset (it routes the call on a cluster); the queue's other keys share
-- its base and hash tag, hence its slot.
local K_READY, K_DELAYED, K_INFLIGHT = KEYS[1], base .. 'delayed', base .. 'inflight'
local K_DONE, K_DEAD, K_PARKED = base .. 'done', base .. 'dead', base .. 'parked'
local K_SEQ, K_SIGNAL = base .. 'seq', base .. 'signal'
local K_CANCELLED = base .. 'cancelled'
local ROW = {{{_ROW_LUA}}}
local WAKE_TOKENS = {WAKE_TOKENS}

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
local hexcache = {{}}
local function hextime(t)
  local hex = hexcache[t]
  if hex then return hex end
  local b = {{string.byte(struct.pack('>d', tonumber(t)), 1, 8)}}
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
local itexts = {{}}
local function itext(x)
  local text = itexts[x]
  if text then return text end
  text = string.format('%d', x)
  itexts[x] = text
  return text
end

-- Pending jobs are filed in `ready` / `delayed` in bulk by flush().
local ready_adds, delayed_adds = {{}}, {{}}

local function make_ready(id, avail, prio, seq)
  local n = #ready_adds
  ready_adds[n + 1] = itext(0 - tonumber(prio))
  ready_adds[n + 2] = hextime(avail) .. string.format('%016x', tonumber(seq)) .. id
end

-- File a pending job due at avail; 1 when it is due by now (ready), else 0 (delayed).
local function pend(id, avail, prio, seq, now)
  -- The same string (due at enqueue, the common case) needs no parsing.
  if avail == now or tonumber(avail) <= tonumber(now) then
    make_ready(id, avail, prio, seq)
    return 1
  end
  local n = #delayed_adds
  delayed_adds[n + 1] = avail
  delayed_adds[n + 2] = id
  return 0
end

local function flush()
  if #ready_adds > 0 then
    bulk('ZADD', K_READY, ready_adds)
    ready_adds = {{}}
  end
  if #delayed_adds > 0 then
    bulk('ZADD', K_DELAYED, delayed_adds)
    delayed_adds = {{}}
  end
end

-- Move the delayed jobs due by `now` to `ready` (what a lease does first).
local function promote_due(now)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now)
  if #due == 0 then return end
  redis.call('ZREMRANGEBYSCORE', K_DELAYED, '-inf', now)
  for _, id in ipairs(due) do
    local f = redis.call('HMGET', jkey(id), 'priority', 'available_at', 'seq')
    if f[1] then make_ready(id, f[2], f[1], f[3]) end
  end
  flush()
end

-- Wake up to `count` idle consumers (each BLPOPs one token).
local function signal(count)
  if count <= 0 then return end
  if count > WAKE_TOKENS then count = WAKE_TOKENS end
  local tokens = {{}}
  for i = 1, count do tokens[i] = '1' end
  redis.call('LPUSH', K_SIGNAL, unpack(tokens))
  redis.call('LTRIM', K_SIGNAL, 0, WAKE_TOKENS - 1)
end

local function row(id, f)
  local r = {{id}}
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
  move(id, f[15], 'pending', 'inflight')
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
"""


def _script(name: str, body: str) -> Script:
    return Script(name, PRELUDE + body)


# ARGV: base, queue name, the jobs as one JSON array [ids, payloads, shared, rows]: `rows` is
# one flat array of ENQUEUE_WIDTH values per job (priority, created_at, available_at,
# max_attempts, parked (true/false), flow_id ('' = none), dependency ids (space-separated, '' =
# none), optional [field, value, ...] (0 = none); times as decimal strings), or 0 when every job
# has the same values, sent once as `shared`.  Flat, because cjson makes a table per array.
# KEYS[2], when given, is the queue registry (single server only; on a cluster the backend
# registers the queue itself, the registry living in another slot).
ENQUEUE: Final = _script(
    "enqueue",
    f"""
local W = {ENQUEUE_WIDTH}
local batch = cjson.decode(ARGV[3])
local ids, payloads, shared, rows = batch[1], batch[2], batch[3], batch[4]
local n = #ids
local seen, keys = {{}}, {{}}
for j = 1, n do
  local id = ids[j]
  if seen[id] then
    return redis.error_reply('BQDUP a job with id ' .. id .. ' already exists')
  end
  seen[id] = true
  keys[j] = jkey(id)
end
-- The row of job j: (table, offset) of its values.
local function row_of(j)
  if rows == 0 then return shared, 0 end
  return rows, (j - 1) * W
end
-- One EXISTS per chunk of ids: none stored is the common case.
local stored = 0
for i = 1, n, CHUNK do
  stored = stored + redis.call('EXISTS', unpack(keys, i, math.min(i + CHUNK - 1, n)))
end
if stored > 0 then
  -- A batch whose every job is already stored as sent (same created_at and payload) is the
  -- queue's retry of this very call after its reply was lost: acknowledge it, store nothing.
  local replayed, taken = 0, nil
  for j = 1, n do
    if redis.call('EXISTS', keys[j]) == 1 then
      local r, at = row_of(j)
      local f = redis.call('HMGET', keys[j], 'created_at', 'payload')
      if f[1] ~= r[at + 2] or f[2] ~= payloads[j] then
        return redis.error_reply('BQDUP a job with id ' .. ids[j] .. ' already exists')
      end
      replayed = replayed + 1
      taken = taken or ids[j]
    end
  end
  if replayed == n then return n end
  return redis.error_reply('BQDUP a job with id ' .. taken .. ' already exists')
end
local pending_index, parked_index, parked = {{}}, {{}}, {{}}
local seq = redis.call('INCRBY', K_SEQ, n) - n
local woken = 0
for j = 1, n do
  local r, at = row_of(j)
  local id, prio, created, avail = ids[j], r[at + 1], r[at + 2], r[at + 3]
  local flow, deps, opt = r[at + 6], r[at + 7], r[at + 8]
  seq = seq + 1
  local seq_text = string.format('%d', seq)
  local key = keys[j]
  local state, index = 'pending', pending_index
  if r[at + 5] then state, index = 'parked', parked_index end
  redis.call('HSET', key, 'state', state, 'payload', payloads[j], 'priority', itext(prio),
    'attempts', '0', 'max_attempts', itext(r[at + 4]), 'created_at', created,
    'available_at', avail, 'seq', seq_text)
  index[#index + 1] = seq_text
  index[#index + 1] = id
  if opt ~= 0 then redis.call('HSET', key, unpack(opt)) end
  if flow ~= '' then
    redis.call('HSET', key, 'flow_id', flow)
    redis.call('ZADD', base .. 'flow:' .. flow, seq_text, id)
  end
  if deps ~= '' then
    redis.call('HSET', key, 'depends_on', deps)
    if state == 'parked' then
      for dep in string.gmatch(deps, '%S+') do redis.call('SADD', base .. 'deps:' .. dep, id) end
    end
  end
  if state == 'parked' then
    parked[#parked + 1] = id
  else
    -- Due at enqueue (by the producer's clock: available_at <= created_at) or delayed.
    woken = woken + pend(id, avail, prio, seq, created)
  end
end
flush()
bulk('ZADD', skey('pending'), pending_index)
bulk('ZADD', skey('parked'), parked_index)
bulk('SADD', K_PARKED, parked)
if KEYS[2] then redis.call('SADD', KEYS[2], ARGV[2]) end
signal(woken)
return n
""",
)

ENQUEUE_UNIQUE: Final = Script(
    "enqueue_unique",
    PRELUDE
    + "local HOLDING = {"
    + ", ".join(f"{state} = true" for state in UNIQUE_HOLDING_STATES)
    + "}"
    + """
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
"""
    + ENQUEUE.source.removeprefix(PRELUDE),
)

# Lease up to `limit` due jobs at `now` (a decimal string) under `token` until `expires`:
# promote the delayed jobs that came due, then take the ready ones in lease order.  Returns
# the leased rows.
_LEASE_DUE = """
local function lease_due(now, limit, token, expires)
  local nnow = tonumber(now)
  promote_due(now)
  local out = {}
  local inflight = {}
  while #out < limit do
    local members = redis.call('ZRANGE', K_READY, 0, limit - #out - 1)
    if #members == 0 then break end
    redis.call('ZREMRANGEBYRANK', K_READY, 0, #members - 1)
    for _, m in ipairs(members) do
      local id = string.sub(m, 33)
      local key = jkey(id)
      local f = redis.call('HMGET', key, unpack(ROW))
      if f[1] == 'pending' then
        if tonumber(f[7]) > nnow then
          -- Due by a clock ahead of ours (another process): not yet for us.
          pend(id, f[7], f[3], f[15], now)
        else
          take(id, key, f, token, expires, inflight, out)
        end
      end
    end
  end
  flush()
  bulk('ZADD', K_INFLIGHT, inflight)
  return out
end
"""

# ARGV: base, now, limit, token, expires_at.  Returns the leased rows (JSON) in lease order.
LEASE: Final = _script(
    "lease",
    _LEASE_DUE
    + """
return encode(lease_due(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]))
""",
)

# Leasing in the same exchange as an idle consumer's blocking wait.  The consumer's connection
# sends, in one write: WAIT_MARK, `BLMOVE <signal> <mark> LEFT RIGHT <timeout>`, LEASE_AFTER_WAIT.
# Redis holds the last command until the BLMOVE returns, then runs it at once: a woken consumer
# gets its jobs without a round trip of its own.
#
# WAIT_MARK.  ARGV: base, the mark key (`<base>wake:<token>`), its TTL in milliseconds.  Starts
# the mark list with the server's time (so that LEASE_AFTER_WAIT knows how long the wait took);
# the BLMOVE appends the wake token it took, if any.  The TTL outlives the wait: a consumer
# that dies meanwhile leaves nothing behind for good.
WAIT_MARK: Final = _script(
    "wait_mark",
    """
local t = redis.call('TIME')
redis.call('DEL', ARGV[2])
redis.call('RPUSH', ARGV[2], t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
redis.call('PEXPIRE', ARGV[2], ARGV[3])
return 1
""",
)

# LEASE_AFTER_WAIT.  ARGV: base, the caller's clock when it sent the wait, limit, token, lease
# seconds, the mark key.  When the wait took a wake token, lease as LEASE would at the caller's
# clock moved on by the time the wait took (by the server's clock, the one clock both ends of
# the wait were read on), and return {rows (JSON), expires_at}; else {'', ''}.
LEASE_AFTER_WAIT: Final = _script(
    "lease_after_wait",
    _LEASE_DUE
    + """
local mark = redis.call('LRANGE', ARGV[6], 0, -1)
redis.call('DEL', ARGV[6])
if #mark < 2 then return {'', ''} end
local t = redis.call('TIME')
local waited = tonumber(t[1]) + tonumber(t[2]) / 1000000 - tonumber(mark[1])
if waited < 0 then waited = 0 end
local now = tonumber(ARGV[2]) + waited
local expires = string.format('%.17g', now + tonumber(ARGV[5]))
return {encode(lease_due(string.format('%.17g', now), tonumber(ARGV[3]), ARGV[4], expires)),
  expires}
""",
)

# ARGV: base, now, the settlements as one JSON array of [id, token, outcome, at, error (false:
# none), keep (true/false), result (false: none)].  Returns one '1' (applied) or '0' (stale)
# per settlement.  The ids of the jobs that ended (done or dead) are published, space-separated,
# on the queue's channel `<base>settled` (one message per call), for result waiters.
SETTLE: Final = _script(
    "settle",
    """
local now = ARGV[2]
local items = cjson.decode(ARGV[3])
local res = {}
local woken = 0
local settled, done, dead = {}, {}, {}

-- Pend every job of `waiting` (parked behind a job that just became done) whose dependencies
-- are all done or gone.
local function release(waiting, at)
  for _, cid in ipairs(waiting) do
    local ck = jkey(cid)
    local c = redis.call('HMGET', ck, 'state', 'depends_on', 'priority', 'seq')
    if c[1] == 'parked' then
      local free = true
      for dep in string.gmatch(c[2] or '', '[^ ]+') do
        local st = redis.call('HGET', jkey(dep), 'state')
        if st and st ~= 'done' then
          free = false
          break
        end
      end
      if free then
        redis.call('HSET', ck, 'state', 'pending', 'available_at', at)
        redis.call('SREM', K_PARKED, cid)
        move(cid, c[4], 'parked', 'pending')
        woken = woken + pend(cid, at, c[3], c[4], now)
      end
    end
  end
end

local ended = {}

for j, item in ipairs(items) do
  local id, token, outcome, at, err, keep = item[1], item[2], item[3], item[4], item[5], item[6]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'state', 'token', 'flow_id', 'priority', 'seq', 'attempts')
  if f[1] ~= 'inflight' or f[2] ~= token then
    res[j] = '0'
  else
    res[j] = '1'
    settled[#settled + 1] = id
    local has_err = type(err) == 'string'
    if outcome == 'done' then
      local waiting = nil
      if f[3] then
        local dkey = base .. 'deps:' .. id
        waiting = redis.call('SMEMBERS', dkey)
        redis.call('DEL', dkey)
      end
      if keep then
        redis.call('HSET', key, 'state', 'done', 'finished_at', at)
        if type(item[7]) == 'string' then redis.call('HSET', key, 'result', item[7]) end
        move(id, f[5], 'inflight', 'done')
        done[#done + 1] = at
        done[#done + 1] = id
      else
        delete_job(id, f[3])
      end
      if waiting then release(waiting, at) end
      ended[#ended + 1] = id
    elseif outcome == 'dead' then
      redis.call('HSET', key, 'state', 'dead', 'finished_at', at)
      move(id, f[5], 'inflight', 'dead')
      if has_err then
        redis.call('HSET', key, 'last_error', err)
      else
        redis.call('HDEL', key, 'last_error')
      end
      dead[#dead + 1] = at
      dead[#dead + 1] = id
      ended[#ended + 1] = id
    elseif outcome == 'retry' then
      redis.call('HSET', key, 'state', 'pending', 'available_at', at)
      move(id, f[5], 'inflight', 'pending')
      if has_err then
        redis.call('HSET', key, 'last_error', err)
      else
        redis.call('HDEL', key, 'last_error')
      end
      woken = woken + pend(id, at, f[4], f[5], now)
    else -- release: the interrupted attempt is given back
      local attempts = tonumber(f[6]) - 1
      if attempts < 0 then attempts = 0 end
      redis.call('HSET', key, 'state', 'pending', 'available_at', at, 'attempts', itext(attempts))
      move(id, f[5], 'inflight', 'pending')
      if has_err then redis.call('HSET', key, 'last_error', err) end
      woken = woken + pend(id, at, f[4], f[5], now)
    end
  end
end
bulk('ZREM', K_INFLIGHT, settled)
bulk('ZADD', K_DONE, done)
bulk('ZADD', K_DEAD, dead)
flush()
signal(woken)
announce(ended)
return table.concat(res)
""",
)

# ARGV: base, expires_at, the leases as one JSON array of [id, token].  One '1' (held), '0'
# (lost) or 'c' (the job was cancelled under this lease: stop the handler) per lease.
EXTEND: Final = _script(
    "extend",
    """
local expires = ARGV[2]
local res = {}
for j, pair in ipairs(cjson.decode(ARGV[3])) do
  local id, token = pair[1], pair[2]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'state', 'token')
  if f[1] == 'inflight' and f[2] == token then
    redis.call('HSET', key, 'expires_at', expires)
    redis.call('ZADD', K_INFLIGHT, expires, id)
    res[j] = '1'
  elseif f[1] == 'cancelled' and f[2] == token then
    res[j] = 'c'
  else
    res[j] = '0'
  end
end
return table.concat(res)
""",
)

# ARGV: base, now, expired_error, cutoff (prune done jobs finished before it), budget.
# Returns [expired rows (JSON), dead rows (JSON), pruned count, more (1: a budget ran out)].
# The jobs it dead-letters or prunes are announced on `<base>settled` (result waiters).
SWEEP: Final = _script(
    "sweep",
    """
local now, err, cutoff, budget = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local expired, dead = {}, {}
local woken = 0
local ids = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', now, 'LIMIT', 0, budget)
bulk('ZREM', K_INFLIGHT, ids)
local buried = {}
for _, id in ipairs(ids) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, unpack(ROW))
  if f[1] == 'inflight' then
    if tonumber(f[4]) >= tonumber(f[5]) then
      redis.call('HSET', key, 'state', 'dead', 'last_error', err, 'finished_at', now)
      move(id, f[15], 'inflight', 'dead')
      buried[#buried + 1] = now
      buried[#buried + 1] = id
      f[1], f[10], f[14] = 'dead', err, now
      dead[#dead + 1] = row(id, f)
    else
      redis.call('HSET', key, 'state', 'pending', 'available_at', now)
      move(id, f[15], 'inflight', 'pending')
      woken = woken + pend(id, now, f[3], f[15], now)
      f[1], f[7] = 'pending', now
      expired[#expired + 1] = row(id, f)
    end
  end
end
bulk('ZADD', K_DEAD, buried)
flush()
local old = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', '(' .. cutoff, 'LIMIT', 0, budget)
for _, id in ipairs(old) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
bulk('ZREM', K_DONE, old)
local gone = redis.call('ZRANGEBYSCORE', K_CANCELLED, '-inf', '(' .. cutoff, 'LIMIT', 0, budget)
for _, id in ipairs(gone) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
bulk('ZREM', K_CANCELLED, gone)
signal(woken)
local ended = {}
for i = 2, #buried, 2 do ended[#ended + 1] = buried[i] end
for _, id in ipairs(old) do ended[#ended + 1] = id end
announce(ended)
local more = 0
if #ids >= budget or #old >= budget or #gone >= budget then more = 1 end
return {encode(expired), encode(dead), #old + #gone, more}
""",
)

# ARGV: base.  Pending (delayed included) + inflight + parked.
SIZE: Final = _script(
    "size",
    """
return redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_DELAYED)
  + redis.call('ZCARD', K_INFLIGHT) + redis.call('SCARD', K_PARKED)
""",
)

# ARGV: base, budget.  Deletes up to `budget` live and retained done jobs; returns
# {live jobs deleted, more (1 when the budget ran out)}.
PURGE: Final = _script(
    "purge",
    """
local budget = tonumber(ARGV[2])
local live = 0
local function wipe(zkey, offset, counts)
  if budget <= 0 then return end
  local members = redis.call('ZRANGE', zkey, 0, budget - 1)
  for _, m in ipairs(members) do
    local id = string.sub(m, offset)
    delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
  end
  if #members > 0 then redis.call('ZREMRANGEBYRANK', zkey, 0, #members - 1) end
  budget = budget - #members
  if counts then live = live + #members end
end
wipe(K_READY, 33, true)
wipe(K_DELAYED, 1, true)
wipe(K_INFLIGHT, 1, true)
if budget > 0 then
  local parked = redis.call('SPOP', K_PARKED, budget)
  for _, id in ipairs(parked) do
    delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
  end
  budget = budget - #parked
  live = live + #parked
end
wipe(K_DONE, 1, false)
wipe(K_CANCELLED, 1, false)
local more = 0
if budget <= 0 then more = 1 end
return {live, more}
""",
)

# ARGV: base, limit (-1: all).  The dead jobs, most recently failed first (JSON rows).
DLQ_LIST: Final = _script(
    "dlq_list",
    """
local ids = redis.call('ZREVRANGE', K_DEAD, 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), unpack(ROW))
  if f[1] == 'dead' then out[#out + 1] = row(id, f) end
end
return encode(out)
""",
)

# ARGV: base, job id, now.  Moves the dead job back to pending (attempts 0, due now) and
# returns its row as it was; '' when this queue has no dead job with that id.
DLQ_RETRY: Final = _script(
    "dlq_retry",
    """
local id, now = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
if f[1] ~= 'dead' then return '' end
local before = cjson.encode(row(id, f))
redis.call('ZREM', K_DEAD, id)
redis.call('HSET', key, 'state', 'pending', 'attempts', '0', 'available_at', now)
move(id, f[15], 'dead', 'pending')
release_unique(id, redis.call('HGET', key, 'unique_key'))  -- back without its unique key
redis.call('HDEL', key, 'finished_at', 'unique_key', 'unique_until')
local woken = pend(id, now, f[3], f[15], now)
flush()
signal(woken)
return before
""",
)

# ARGV: base, budget.  Deletes up to `budget` dead jobs; returns {deleted, more}.
DLQ_PURGE: Final = _script(
    "dlq_purge",
    """
local budget = tonumber(ARGV[2])
local ids = redis.call('ZRANGE', K_DEAD, 0, budget - 1)
for _, id in ipairs(ids) do
  delete_job(id, redis.call('HGET', jkey(id), 'flow_id'))
end
if #ids > 0 then redis.call('ZREMRANGEBYRANK', K_DEAD, 0, #ids - 1) end
local more = 0
if #ids >= budget then more = 1 end
return {#ids, more}
""",
)

# ARGV: base, flow id.  The flow's jobs still stored in this queue, in enqueue order.
FLOW_JOBS: Final = _script(
    "flow_jobs",
    """
local ids = redis.call('ZRANGE', base .. 'flow:' .. ARGV[2], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), unpack(ROW))
  if f[1] then out[#out + 1] = row(id, f) end
end
return encode(out)
""",
)

# ARGV: base, job id.  The job's row in any state; '' when this queue has no such job.
GET_JOB: Final = _script(
    "get_job",
    """
local id = ARGV[2]
local f = redis.call('HMGET', jkey(id), unpack(ROW))
if not f[1] then return '' end
return cjson.encode(row(id, f))
""",
)

# ARGV: base, states to visit in order (space-separated), seq after which the first state
# starts (-1: from its start), limit.  Rows of up to limit + 1 jobs, by state then seq (the
# `st:<state>` zsets): the caller keeps limit and knows whether more follow.  A page costs
# O(log n + limit) however deep it is.
LIST_JOBS: Final = _script(
    "list_jobs",
    """
local after, want = ARGV[3], tonumber(ARGV[4]) + 1
local out = {}
for state in string.gmatch(ARGV[2], '%S+') do
  if #out >= want then break end
  local ids = redis.call('ZRANGEBYSCORE', skey(state), '(' .. after, '+inf',
    'LIMIT', 0, want - #out)
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', jkey(id), unpack(ROW))
    if f[1] then out[#out + 1] = row(id, f) end
  end
  after = '-inf'
end
return encode(out)
""",
)

# ARGV: base.  {pending, inflight, parked, done, dead, cancelled} counts of the queue.
COUNTS: Final = _script(
    "counts",
    """
return {redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_DELAYED),
  redis.call('ZCARD', K_INFLIGHT), redis.call('SCARD', K_PARKED),
  redis.call('ZCARD', K_DONE), redis.call('ZCARD', K_DEAD), redis.call('ZCARD', K_CANCELLED)}
""",
)

# ARGV: base, job id, now.  Moves a pending (due or delayed), inflight or parked job to
# 'cancelled' (finished_at = now), out of every index a lease, the sweep or size() reads; its
# token stays, fencing the old lease (settle wants 'inflight') and telling extend to report
# the cancel.  Returns {1, row} when it cancelled the job, {0, row} when the job had already
# finished (left as it is), '' when this queue has no such job.
CANCEL: Final = _script(
    "cancel",
    """
local id, now = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, unpack(ROW))
if not f[1] then return '' end
local was = f[1]
if was == 'pending' then
  redis.call('ZREM', K_DELAYED, id)
  redis.call('ZREM', K_READY, hextime(f[7]) .. string.format('%016x', tonumber(f[15])) .. id)
elseif was == 'inflight' then
  redis.call('ZREM', K_INFLIGHT, id)
elseif was == 'parked' then
  -- Its entries in deps:<dep> stay: a release only moves jobs still parked.
  redis.call('SREM', K_PARKED, id)
else
  return {0, cjson.encode(row(id, f))}
end
redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now)
move(id, f[15], was, 'cancelled')
redis.call('ZADD', K_CANCELLED, now, id)
f[1], f[14] = 'cancelled', now
return {1, cjson.encode(row(id, f))}
""",
)

# The worker registry: KEYS = the records hash and the heartbeats zset (one hash tag, one
# slot).  Not per-queue scripts: no prelude.
# ARGV: worker id, heartbeat_at, record (JSON).
WORKER_BEAT: Final = Script(
    "worker_beat",
    """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
""",
)

# ARGV: worker id.
WORKER_GONE: Final = Script(
    "worker_gone",
    """
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
""",
)

# ARGV: alive_since.  Deletes the records heartbeated before alive_since; returns the rest
# as a flat list of records (JSON).
WORKER_LIST: Final = Script(
    "worker_list",
    """
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1])
for i = 1, #stale, 4000 do
  local j = math.min(i + 3999, #stale)
  redis.call('HDEL', KEYS[1], unpack(stale, i, j))
  redis.call('ZREM', KEYS[2], unpack(stale, i, j))
end
return redis.call('HVALS', KEYS[1])
""",
)

SCRIPTS: Final = (
    CANCEL,
    ENQUEUE,
    LEASE,
    WAIT_MARK,
    LEASE_AFTER_WAIT,
    SETTLE,
    EXTEND,
    SWEEP,
    SIZE,
    PURGE,
    DLQ_LIST,
    DLQ_RETRY,
    DLQ_PURGE,
    FLOW_JOBS,
    GET_JOB,
    LIST_JOBS,
    COUNTS,
    WORKER_BEAT,
    WORKER_GONE,
    WORKER_LIST,
    ENQUEUE_UNIQUE,
)
