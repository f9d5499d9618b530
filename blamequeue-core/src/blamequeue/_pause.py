"""Pause and resume a queue across every worker sharing the backend (SPEC §9).

The flag is a shared record (kind ``paused``, key the queue name), so it survives restarts
and every process sees it.  Consumers (and ``tick``) read it before they lease, at most once
per :data:`PAUSE_CHECK` seconds of the queue's clock, and not at all while the flag is cached:
a worker in another process stops leasing within that long of ``pause()``, one in this
process at once.  A paused queue still takes enqueues; jobs already running finish.
"""

from __future__ import annotations

import os
import socket
from typing import Final

from ._records import RecordStore
from ._runtime import BackendRuntime
from .errors import QueueError

__all__ = ["PAUSE_CHECK", "is_paused", "set_paused"]

PAUSE_CHECK: Final = 1.0
"""Seconds a worker trusts the pause flag it last read."""

_KIND = "paused"


async def set_paused(runtime: BackendRuntime, queue: str, paused: bool) -> bool:
    """Pause (or resume) ``queue``; returns whether that changed anything."""
    store = RecordStore(runtime)
    now = store.now()
    if paused:
        who = {"at": now, "host": socket.gethostname(), "pid": os.getpid()}
        changed = await store.put(_KIND, queue, who, if_absent=True)
    else:
        changed = await store.delete(_KIND, queue)
    runtime.paused[queue] = (paused, now)
    runtime.notify(queue)  # this process's idle consumers look again at once
    return changed


async def is_paused(runtime: BackendRuntime, queue: str, *, fresh: bool = False) -> bool:
    """Whether ``queue`` is paused, from the cache when it is younger than
    :data:`PAUSE_CHECK` (unless ``fresh``).  A backend without shared records is never
    paused; one that cannot be read keeps the last answer (workers keep working through a
    blip rather than stop)."""
    if not runtime.backend.capabilities.records:
        return False
    now = runtime.clock.now()
    cached = runtime.paused.get(queue)
    if not fresh and cached is not None and now - cached[1] < PAUSE_CHECK:
        return cached[0]
    try:
        paused = await RecordStore(runtime).get(_KIND, queue) is not None
    except QueueError:
        if fresh:
            raise
        return False if cached is None else cached[0]
    runtime.paused[queue] = (paused, now)
    return paused
