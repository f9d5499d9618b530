"""pytest plugin (entry point ``pytest11: blamequeue``): the ``bq_*`` fixtures.

* ``bq_clock``: a fresh :class:`~blamequeue_testing.VirtualClock`.
* ``bq_queue``: a started ``blamequeue.Queue`` with one backend, ``"memory"`` (protocol
  ``memory``, a private store), driven by ``bq_clock``, with no sweep timer
  (``sweep_interval=0``: call ``await bq_queue.sweep()`` after advancing the clock); shut down
  after the test.  It is an async fixture: use it from tests run by anyio's pytest plugin
  (``@pytest.mark.anyio``), on asyncio or trio.
* ``bq_fake``: a :class:`~blamequeue_testing.QueueFake` installed on ``bq_queue`` for the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from ._clock import VirtualClock
from ._fake import QueueFake

if TYPE_CHECKING:
    from blamequeue import Queue

__all__ = ["bq_clock", "bq_fake", "bq_queue"]


@pytest.fixture
def bq_clock() -> VirtualClock:
    """A :class:`~blamequeue_testing.VirtualClock`; advance it instead of sleeping."""
    return VirtualClock()


@pytest.fixture
async def bq_queue(bq_clock: VirtualClock) -> AsyncIterator[Queue]:
    """A started ``Queue`` on the ``memory`` backend, driven by ``bq_clock``."""
    # Imported here, not at module level: pytest loads this plugin in every session of an
    # environment that has blamequeue-testing installed, and importing the engine there would
    # make each of those sessions pay for it (or fail with it).
    from blamequeue import Queue

    queue = Queue(backends={"memory": {"protocol": "memory"}}, clock=bq_clock, sweep_interval=0)
    async with queue:
        yield queue


@pytest.fixture
def bq_fake(bq_queue: Queue, bq_clock: VirtualClock) -> Iterator[QueueFake]:
    """A :class:`~blamequeue_testing.QueueFake` recording ``bq_queue``'s dispatches."""
    with QueueFake(bq_queue, clock=bq_clock) as fake:
        yield fake
