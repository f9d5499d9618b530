-- record_prune: deletes a kind's expired records.  After the records prelude.
--
-- KEYS[1]: R:keys.
-- ARGV: R, now.
-- Returns: how many it deleted.

local gone = redis.call('ZRANGEBYSCORE', base .. ':exp', '-inf', ARGV[2])
for i = 1, #gone do drop(gone[i]) end
return #gone
