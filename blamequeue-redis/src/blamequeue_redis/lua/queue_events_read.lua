-- queue_events_read: the events of the queue's log after a watcher's cursor.  After the
-- queue prelude.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, cursor (the n of the last event read; 0: none), count (the most to return).
-- Returns: {missed (1 when the trim passed the cursor, or the log was deleted and begun
--   again), the new cursor, event, event, ...}.

local K_EVENTS = base .. 'events'
local cursor = tonumber(ARGV[2])
local entries = redis.call('XRANGE', K_EVENTS, cursor .. '-1', '+', 'COUNT', tonumber(ARGV[3]))
local reply = {0, cursor}
if #entries == 0 then
  local last = redis.call('XREVRANGE', K_EVENTS, '+', '-', 'COUNT', 1)
  local n = 0
  if last[1] then n = tonumber(string.match(last[1][1], '^(%d+)')) end
  if n < cursor then
    -- Deleted and begun again below the cursor: read it from its start.
    return {1, 0}
  end
  return reply
end
if tonumber(string.match(entries[1][1], '^(%d+)')) > cursor + 1 then reply[1] = 1 end
for _, entry in ipairs(entries) do
  reply[#reply + 1] = entry[2][2]
end
reply[2] = tonumber(string.match(entries[#entries][1], '^(%d+)'))
return reply
