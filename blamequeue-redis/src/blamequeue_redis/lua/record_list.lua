-- record_list: one page of a kind's records in key order.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, now, lex min ('[prefix' or '-'), lex max ('(bound' or '+'), limit (-1 = none).
-- Prunes the kind's expired records first, so the page holds only live ones.
-- Returns: the rows (as record_get.lua's).

local gone = redis.call('ZRANGEBYSCORE', base .. ':exp', '-inf', ARGV[2])
for i = 1, #gone do drop(gone[i]) end
local keys = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[3], ARGV[4], 'LIMIT', 0, ARGV[5])
local out = {}
for i = 1, #keys do out[#out + 1] = row(keys[i]) end
return out
