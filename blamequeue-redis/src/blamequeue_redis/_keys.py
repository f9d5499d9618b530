"""Where the ``redis`` backend keeps things: the key layout (documented in
``docs/backends/redis.md``).

Every key of one queue carries the queue name as a Redis Cluster *hash tag*
(``{prefix}:{<queue>}:<suffix>``), so all of them hash to one slot and a Lua script may touch
them together on a cluster.  A queue name holding ``{``, ``}`` or ``%`` is percent-escaped inside
the tag, so the tag is never empty or cut short and two queue names never share keys.

Per queue (``B = {prefix}:{<queue>}:``):

===================  ======  ===============================================================
key                  type    holds
===================  ======  ===============================================================
``B job:<id>``       hash    one job: state, payload, priority, attempts, times, token, ...
``B ready``          zset    due pending jobs: score ``-priority``, member
                             ``hex(available_at) hex(seq) <id>`` (equal scores sort by member)
``B delayed``        zset    pending jobs not yet due: score ``available_at``, member ``<id>``
``B inflight``       zset    leased jobs: score lease expiry, member ``<id>``
``B done``           zset    retained done jobs: score ``finished_at`` (retention pruning)
``B dead``           zset    the dead-letter queue: score ``finished_at``
``B cancelled``      zset    retained cancelled jobs: score ``finished_at`` (pruned like done)
``B parked``         set     flow children waiting for their dependencies
``B deps:<id>``      set     ids of parked jobs waiting for job ``<id>``
``B flow:<flow_id>`` zset    the jobs of one flow, score = enqueue order
``B st:<state>``     zset    the jobs in ``<state>``: score seq, member ``<id>`` (inspection's
                             listing order; kept by every transition)
``B seq``            string  the queue's enqueue counter (leasing's last tie-breaker)
``B signal``         list    wake-up tokens; idle consumers ``BLPOP`` it
``B bucket``         hash    the fleet-wide rate limit's token bucket: ``tokens``, ``at``
===================  ======  ===============================================================

And one key for the whole prefix: ``{prefix}:queues``, a set of every queue name ever
enqueued to, so a sweep (and an operation given only a job id) can visit every queue; and the
worker registry, ``{prefix}:{workers}:records`` (hash: worker id -> record JSON) and
``{prefix}:{workers}:beats`` (zset: worker id scored by its last heartbeat), one fixed hash tag.

Pub/sub (no key): ``B settled`` carries the space-separated ids of the jobs one settle call
ended (``done`` or ``dead``), published by the settle script atomically with the settlement;
``{prefix}:events:<job id>`` carries one job's progress events (``p<event>`` per
``ctx.progress``).  ``Queue.result`` and ``Queue.subscribe`` waiters listen to both.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["DEFAULT_PREFIX", "KeyLayout", "QueueKeys"]

DEFAULT_PREFIX: Final = "blamequeue:queue"

_ESCAPES: Final = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def hash_tag(queue: str) -> str:
    """The text inside the braces of ``queue``'s hash tag: the name, braces and ``%`` escaped."""
    return queue.translate(_ESCAPES)


@attrs.frozen(kw_only=True)
class QueueKeys:
    """The keys of one queue, in the order every per-queue script receives them as ``KEYS``."""

    queue: str
    base: str
    """``{prefix}:{<queue>}:``; scripts build ``job:<id>``, ``deps:<id>``, ``flow:<id>`` on it."""

    @property
    def ready(self) -> str:
        return self.base + "ready"

    @property
    def signal(self) -> str:
        return self.base + "signal"

    @property
    def dead(self) -> str:
        return self.base + "dead"

    def job(self, job_id: str) -> str:
        return f"{self.base}job:{job_id}"

    def script_keys(self) -> tuple[str, ...]:
        """``KEYS`` of every per-queue script: the ready key, which routes the call on a
        cluster (the scripts build the queue's other keys on :attr:`base`, same slot)."""
        return (self.base + "ready",)


@attrs.frozen
class KeyLayout:
    """Key names under one ``key_prefix``."""

    prefix: str

    @property
    def registry(self) -> str:
        """The set of every queue name enqueued to under this prefix."""
        return f"{self.prefix}:queues"

    @property
    def events_prefix(self) -> str:
        """The pub/sub channel of a job's live events is this plus its id."""
        return f"{self.prefix}:events:"

    def queue(self, queue: str) -> QueueKeys:
        return QueueKeys(queue=queue, base=f"{self.prefix}:{{{hash_tag(queue)}}}:")
