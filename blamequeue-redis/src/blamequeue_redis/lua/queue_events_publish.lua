-- queue_events_publish: append events to the queue's event log (Queue.watch), in order, in
-- one step.  After the queue prelude.
--
-- The log is the stream `events`, trimmed to about ${QUEUE_EVENTS_KEPT} entries
-- (MAXLEN ~).  Entry ids are `<n>-0` with n counting the queue's events one by one, so a
-- watcher whose next entry is not its last n + 1 knows the trim passed it.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, then the events (opaque text from the core).
-- Returns: the n of the last event appended.

local K_EVENTS = base .. 'events'
local last = redis.call('XREVRANGE', K_EVENTS, '+', '-', 'COUNT', 1)
local n = 0
if last[1] then n = tonumber(string.match(last[1][1], '^(%d+)')) end
for i = 2, #ARGV do
  n = n + 1
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', ${QUEUE_EVENTS_KEPT}, n .. '-0', 'e', ARGV[i])
end
return n
