"""The conformance suite against a backend with the required part of the contract only (no
facet), as a third-party author's first backend is: every test of the required part passes, the
tests of each facet skip saying which capability is missing, and the ``TestWithout...`` classes
check that the core refuses each facet's features with its clear code."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from blamequeue._plugins import Registration, load_registry
from blamequeue_testing import MemoryBackend
from blamequeue_testing.conformance import *  # noqa: F403
from testing.required_only import RequiredOnlyBackend


@pytest.fixture(autouse=True)
def _required_only_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        load_registry().protocols,
        RequiredOnlyBackend.protocol,
        Registration(value=RequiredOnlyBackend, plugin="tests"),
    )


@pytest.fixture
def bq_backend_config() -> Iterator[dict[str, Any]]:
    namespace = f"required-only-{uuid.uuid4().hex}"  # one store for the test's queues
    yield {"protocol": RequiredOnlyBackend.protocol, "namespace": namespace}
    MemoryBackend.forget_namespace(namespace)


def test_the_required_class_alone_derives_no_capability_of_a_facet() -> None:
    caps = RequiredOnlyBackend.capabilities
    assert not any((caps.dlq, caps.flows, caps.records, caps.unique, caps.inspection, caps.results))
    assert not any((caps.cancel, caps.progress_events, caps.cross_process_wakeup))
    assert not any((caps.global_rate_limit, caps.group_limits, caps.wait_and_lease))
