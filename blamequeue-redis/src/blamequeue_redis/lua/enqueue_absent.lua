-- enqueue_absent: enqueue.lua for the jobs whose ids the queue does not hold, in any state.
-- Assembled as the queue prelude, this file's first part, enqueue.lua's text made the body of
-- a function, then this file's last part (see blamequeue_redis._scripts).
--
-- KEYS, ARGV: as enqueue.lua.
-- Returns: one character per job sent, '1' when this call stored it (or found it stored
--   exactly as sent: the retry of a call whose reply was lost), '0' when a job with its id
--   was already stored (or came earlier in the batch) and it was left alone; or enqueue.lua's
--   error reply.
--
-- ${ENQUEUE_WIDTH} is filled in at load from blamequeue_redis._scripts.

local sent = cjson.decode(ARGV[3])
local sent_ids, sent_payloads, sent_shared, sent_rows = sent[1], sent[2], sent[3], sent[4]
local SENT_W = ${ENQUEUE_WIDTH}
local flags, keep, taken = {}, {}, {}
for j = 1, #sent_ids do
  local id = sent_ids[j]
  local r, at = sent_shared, 0
  if sent_rows ~= 0 then r, at = sent_rows, (j - 1) * SENT_W end
  if taken[id] then
    flags[j] = '0'
  else
    local f = redis.call('HMGET', jkey(id), 'created_at', 'payload')
    if f[1] then
      if f[1] == r[at + 2] and f[2] == sent_payloads[j] then flags[j] = '1' else flags[j] = '0' end
    else
      flags[j] = '1'
      keep[#keep + 1] = j
    end
  end
  taken[id] = true
end
if #keep == 0 then return table.concat(flags) end
if #keep < #sent_ids then
  local ids, payloads, rows = {}, {}, 0
  if sent_rows ~= 0 then rows = {} end
  for i, j in ipairs(keep) do
    ids[i], payloads[i] = sent_ids[j], sent_payloads[j]
    if sent_rows ~= 0 then
      for w = 1, SENT_W do rows[(i - 1) * SENT_W + w] = sent_rows[(j - 1) * SENT_W + w] end
    end
  end
  ARGV[3] = cjson.encode({ids, payloads, sent_shared, rows})
end
