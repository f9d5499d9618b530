-- Fragment shared by settle.lua, sweep.lua and cancel.lua, placed between the queue prelude and
-- their own text: release(waiting, at, now) and fall(id, at, now).
--
-- A flow job's hash holds `on_dependency_failure` ('fail' or 'ignore'; absent: wait) and
-- `dependants_error` (the last_error its failing dependants get; absent: none fails with it)
-- only when enqueued with them, so the jobs of other flows and outside flows carry neither.
-- Both functions file what they release with pend(); the caller flushes and signals.

-- Pend every job of `waiting` (ids of jobs parked behind a job that just became done, or died)
-- whose dependencies are all done or gone (for a job that ignores dead dependencies: done,
-- dead, cancelled or gone), due at `at`.  Returns how many of them are due by `now`.
local function release(waiting, at, now)
  local woken = 0
  for _, cid in ipairs(waiting) do
    local ck = jkey(cid)
    local c = redis.call('HMGET', ck, 'state', 'depends_on', 'priority', 'seq', 'lifo',
      'on_dependency_failure')
    if c[1] == 'parked' then
      local ignores = c[6] == 'ignore'
      local free = true
      for dep in string.gmatch(c[2] or '', '[^ ]+') do
        local st = redis.call('HGET', jkey(dep), 'state')
        if st and st ~= 'done' and not (ignores and (st == 'dead' or st == 'cancelled')) then
          free = false
          break
        end
      end
      if free then
        redis.call('HSET', ck, 'state', 'pending', 'available_at', at)
        redis.call('SREM', K_PARKED, cid)
        move(cid, c[4], 'parked', 'pending')
        woken = woken + pend(cid, at, c[3], c[4], now, c[5])
      end
    end
  end
  return woken
end

-- The flow job `id` just became dead or cancelled at `at`: each job parked behind it follows
-- its on_dependency_failure.  'fail': dead too (finished_at `at`, last_error the
-- dependants_error of the job it waited for, attempts unchanged), into the DLQ, and the jobs
-- parked behind *it* follow theirs in turn (a walk over deps:<id> sets, each job dying once:
-- a job no longer parked is passed over); 'ignore': released once the rest is done; wait:
-- nothing.  deps:<id> of every dead job stays, so a job still waiting is released should that
-- one be retried and complete.  Appends the ids of the jobs it dead-letters to `fallen`;
-- returns how many jobs it released are due by `now`.
local function fall(id, at, now, fallen)
  local woken = 0
  local walk = {id}
  local i = 1
  while walk[i] do
    local gone = walk[i]
    i = i + 1
    local notice = nil
    local ignoring = {}
    for _, cid in ipairs(redis.call('SMEMBERS', base .. 'deps:' .. gone)) do
      local ck = jkey(cid)
      local c = redis.call('HMGET', ck, 'state', 'on_dependency_failure', 'seq')
      if c[1] == 'parked' and c[2] == 'fail' then
        if notice == nil then notice = redis.call('HGET', jkey(gone), 'dependants_error') end
        redis.call('HSET', ck, 'state', 'dead', 'finished_at', at)
        if notice then
          redis.call('HSET', ck, 'last_error', notice)
        else
          redis.call('HDEL', ck, 'last_error')
        end
        redis.call('SREM', K_PARKED, cid)
        move(cid, c[3], 'parked', 'dead')
        redis.call('ZADD', K_DEAD, at, cid)
        fallen[#fallen + 1] = cid
        walk[#walk + 1] = cid
      elseif c[1] == 'parked' and c[2] == 'ignore' then
        ignoring[#ignoring + 1] = cid
      end
    end
    woken = woken + release(ignoring, at, now)
  end
  return woken
end
