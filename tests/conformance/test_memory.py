"""The conformance suite against the ``memory`` backend (blamequeue-testing)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from blamequeue_testing import MemoryBackend
from blamequeue_testing.conformance import *  # noqa: F403


@pytest.fixture
def bq_backend_config() -> Iterator[dict[str, Any]]:
    # A namespace of its own per test: every Queue built in one test shares the store, like
    # workers on one database (the shutdown tests look at it through a second Queue).
    namespace = f"conformance-{uuid.uuid4().hex}"
    yield {"protocol": "memory", "namespace": namespace}
    MemoryBackend.forget_namespace(namespace)
