-- queue_stats: what a health check reads of a queue.  After the queue prelude.  How it finds
-- the oldest due job: blamequeue_redis._stats_script.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now.
-- Returns: {delayed count, earliest due available_at ('' = none)}.
--
-- ${PRIORITIES_SCANNED} is filled in at load from blamequeue_redis._stats_script.

local now = ARGV[2]
local delayed = redis.call('ZCOUNT', K_DELAYED, '(' .. now, '+inf')
local oldest, oldest_text = nil, ''
local function consider(at)
  local n = tonumber(at)
  if n and (oldest == nil or n < oldest) then oldest, oldest_text = n, at end
end
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #due > 0 then consider(redis.call('HGET', jkey(due[1]), 'available_at')) end
local score = '-inf'
for _ = 1, ${PRIORITIES_SCANNED} do
  local head = redis.call('ZRANGEBYSCORE', K_READY, score, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #head == 0 then break end
  if tonumber(head[2]) % 1 ~= 0 then
    -- A lifo band (score -priority - 0.5) starts with its latest due job: take its last.
    head[1] = redis.call('ZREVRANGEBYSCORE', K_READY, head[2], head[2], 'LIMIT', 0, 1)[1]
  end
  consider(redis.call('HGET', jkey(string.sub(head[1], 33)), 'available_at'))
  score = '(' .. head[2]
end
return {delayed, oldest_text}
