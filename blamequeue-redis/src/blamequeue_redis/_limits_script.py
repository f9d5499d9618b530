"""The Lua script of the ``redis`` backend's lease under fleet-wide limits
(``lua/lease_limited.lua``, after the queue prelude of :mod:`blamequeue_redis._scripts`).

One script, so refilling and spending the queue's rate tokens, counting each group's inflight
jobs and taking jobs are one atomic step, whatever other processes do.

* The token bucket is the hash ``B bucket`` (``tokens``, ``at``), refilled from the caller's
  ``now`` (never the server clock); a bucket never seen starts full.
* A group's inflight count is read from the queue's ``inflight`` zset (one ``HGET`` per job in
  flight, so it costs what the fleet runs at once, not the backlog).
* The ``ready`` zset is walked in leasing order.  A job of a group at its limit stays where it
  is and the walk moves past it; jobs taken are removed.  The walk looks at no more than
  :data:`SCAN_MAX` skipped jobs per call, so a saturated group with a huge backlog at the head
  bounds the script's time (it then returns fewer jobs; the next lease walks again).
"""

from __future__ import annotations

from typing import Final

from blamequeue_redis._scripts import _script, read_lua

__all__ = ["LEASE_LIMITED", "SCAN_MAX"]

#: The most skipped jobs (of groups at their limit) one limited lease walks past.
SCAN_MAX: Final = 5000

# KEYS, ARGV and reply: the top of lua/lease_limited.lua.
LEASE_LIMITED: Final = _script("lease_limited", read_lua("lease_limited", SCAN_MAX=SCAN_MAX))
