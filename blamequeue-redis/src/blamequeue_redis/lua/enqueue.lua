-- enqueue: stores a batch of new jobs of one queue, all or nothing.  After the queue prelude.
--
-- KEYS[1]: the queue's ready zset.  KEYS[2], when given: the queue registry (single server
--   only; on a cluster the backend registers the queue itself, the registry living in another
--   slot).
-- ARGV[1]: the queue's key base.  ARGV[2]: the queue's name (for the registry).
-- ARGV[3]: the jobs as one JSON array [ids, payloads, shared, rows]: `rows` is one flat array
--   of ENQUEUE_WIDTH values per job (priority, created_at, available_at, max_attempts, parked
--   (true/false), flow_id ('' = none), dependency ids (space-separated, '' = none), optional
--   [field, value, ...] (0 = none), lifo (true/false); times as decimal strings), or 0 when
--   every job has the
--   same values, sent once as `shared`.  Flat, because cjson makes a table per array.
-- Returns: the number of jobs, also when every job is already stored exactly as sent (the
--   retry of a call whose reply was lost: nothing stored); an error reply `BQDUP ...` when an
--   id is taken (nothing stored).
--
-- ${ENQUEUE_WIDTH} is filled in at load from blamequeue_redis._scripts.

local W = ${ENQUEUE_WIDTH}
local batch = cjson.decode(ARGV[3])
local ids, payloads, shared, rows = batch[1], batch[2], batch[3], batch[4]
local n = #ids
local seen, keys = {}, {}
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
local pending_index, parked_index, parked = {}, {}, {}
local seq = redis.call('INCRBY', K_SEQ, n) - n
local woken = 0
for j = 1, n do
  local r, at = row_of(j)
  local id, prio, created, avail = ids[j], r[at + 1], r[at + 2], r[at + 3]
  local flow, deps, opt, lifo = r[at + 6], r[at + 7], r[at + 8], r[at + 9]
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
  if lifo then redis.call('HSET', key, 'lifo', '1') end
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
    woken = woken + pend(id, avail, prio, seq, created, lifo)
  end
end
flush()
bulk('ZADD', skey('pending'), pending_index)
bulk('ZADD', skey('parked'), parked_index)
bulk('SADD', K_PARKED, parked)
if KEYS[2] then redis.call('SADD', KEYS[2], ARGV[2]) end
signal(woken)
return n
