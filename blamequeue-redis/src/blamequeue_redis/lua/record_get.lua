-- record_get: reads records.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, now, key...
-- Returns: one entry per key: its row {key, value (false: none), expiry ('' = none),
--   {counter name, value, ...}}, or false.

local out = {}
for i = 3, #ARGV do
  if live(ARGV[i], ARGV[2]) then out[#out + 1] = row(ARGV[i]) else out[#out + 1] = false end
end
return out
