"""blamequeue's test kit: the ``memory`` backend, a virtual clock, fakes and a pytest plugin.

The backend conformance suite lives in :mod:`blamequeue_testing.conformance` (imported on its
own, never from here); the pytest fixtures in :mod:`blamequeue_testing.pytest_plugin`; throwaway
``redis-server`` and moto SQS servers for test suites and ``blamequeue bench`` in
:mod:`blamequeue_testing.servers` (also imported on its own).
"""

from __future__ import annotations

from ._clock import VirtualClock
from ._fake import Dispatch, FakeJobContext, QueueFake, SyncFakeJobContext
from ._memory import MemoryBackend

__all__ = [
    "Dispatch",
    "FakeJobContext",
    "MemoryBackend",
    "QueueFake",
    "SyncFakeJobContext",
    "VirtualClock",
]
