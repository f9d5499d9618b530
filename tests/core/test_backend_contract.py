"""The layered backend contract of ``blamequeue.abc``: a required class, facets a backend takes
by inheriting them, capabilities derived from those facets (never set by hand), and the clear
refusal of a facet a backend lacks."""

from __future__ import annotations

import attrs
import pytest

from blamequeue._clock import SystemClock
from blamequeue.abc import (
    FACETS,
    Backend,
    BackendContext,
    Capabilities,
    DeadLetters,
    Flows,
    Inspection,
    OverlappedLease,
    Records,
    Results,
    WaitAndLease,
    Wakeup,
)
from blamequeue.errors import UnsupportedError
from blamequeue_local import LocalBackend
from blamequeue_redis import RedisBackend
from blamequeue_sqs import SqsBackend
from blamequeue_testing import MemoryBackend
from testing.required_only import RequiredOnlyBackend

TRAITS = {
    "priority",
    "delay",
    "requires_seal_key",
    "ephemeral",
    "store_clock",
    "keeps_done",
    "async_libraries",
}


def test_each_capability_is_given_by_one_facet_or_is_a_trait_of_the_store() -> None:
    given = [facet.capability for facet in FACETS]
    assert len(given) == len(set(given))
    fields = {field.name for field in attrs.fields(Capabilities)}
    assert set(given) | TRAITS == fields
    assert not set(given) & TRAITS


def test_capabilities_follow_from_the_facets_inherited() -> None:
    class Minimal(RequiredOnlyBackend):
        protocol = "minimal"

    class WithDeadLetters(RequiredOnlyBackend, DeadLetters):
        protocol = "with-dlq"

    assert not Minimal.capabilities.dlq
    caps = WithDeadLetters.capabilities
    assert caps.dlq
    others = {facet.capability for facet in FACETS} - {"dlq"}
    assert not any(getattr(caps, name) for name in others)


def test_a_facet_that_needs_another_brings_it() -> None:
    assert issubclass(Results, Inspection)
    assert issubclass(WaitAndLease, Wakeup)
    assert MemoryBackend.capabilities.inspection
    assert MemoryBackend.capabilities.results


def test_traits_are_class_attributes_of_the_store() -> None:
    class Remote(RequiredOnlyBackend):
        protocol = "remote"
        requires_seal_key = True
        ephemeral = False
        priority = False

    caps = Remote.capabilities
    assert (caps.requires_seal_key, caps.ephemeral, caps.priority) == (True, False, False)


def test_setting_capabilities_by_hand_is_refused_naming_the_facets() -> None:
    with pytest.raises(TypeError, match="derived from the facets") as info:

        class HandSet(RequiredOnlyBackend):
            protocol = "hand-set"
            capabilities = Capabilities(dlq=True)  # type: ignore[misc]

    assert "DeadLetters" in str(info.value)


def test_a_facet_is_a_promise_its_methods_must_keep() -> None:
    class Forgetful(RequiredOnlyBackend, DeadLetters):  # no dlq_* methods
        protocol = "forgetful"

    context = BackendContext(name="b", clock=SystemClock())
    with pytest.raises(TypeError, match="dlq_list"):
        Forgetful({}, context)  # type: ignore[abstract]


def test_of_hands_back_the_backend_with_the_facet_or_refuses_with_its_code() -> None:
    context = BackendContext(name="b", clock=SystemClock())
    memory = MemoryBackend({}, context)
    assert DeadLetters.of(memory) is memory
    bare = RequiredOnlyBackend({}, context)
    for facet, code in [
        (DeadLetters, "queue/dlq-unsupported"),
        (Flows, "queue/flow-unsupported"),
        (Records, "queue/records-unsupported"),
        (Inspection, "queue/inspection-unsupported"),
    ]:
        with pytest.raises(UnsupportedError) as info:
            facet.of(bare)
        assert info.value.code == code
        assert "backend 'b' (protocol 'required-only') cannot" in info.value.message
        assert f"capabilities include {facet.capability}" in info.value.message
        assert not info.value.retryable
    with pytest.raises(TypeError, match="speed-only"):
        OverlappedLease.of(bare)


@pytest.mark.parametrize(
    ("backend", "facets", "lacks"),
    [
        (LocalBackend, {"dlq", "flows", "records", "inspection", "cross_process_wakeup"}, set()),
        (RedisBackend, {"dlq", "wait_and_lease", "overlapped_lease", "records"}, set()),
        (SqsBackend, {"dlq", "cross_process_wakeup"}, {"flows", "records", "inspection"}),
        (MemoryBackend, {"dlq", "flows", "records", "cancel"}, {"cross_process_wakeup"}),
    ],
)
def test_the_shipped_backends_take_the_facets_they_hold(
    backend: type[Backend], facets: set[str], lacks: set[str]
) -> None:
    caps = backend.capabilities
    assert all(getattr(caps, name) for name in facets)
    assert not any(getattr(caps, name) for name in lacks)
