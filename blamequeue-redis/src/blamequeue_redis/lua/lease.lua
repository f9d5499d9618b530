-- lease: leases up to `limit` due jobs.  Assembled as the queue prelude, lease_due.lua, this
-- file.
--
-- KEYS[1]: the queue's ready zset.
-- ARGV: base, now, limit, token, expires_at.
-- Returns: the leased rows (JSON, '' for none) in lease order.

return encode(lease_due(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]))
