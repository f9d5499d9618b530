"""Retry policy and circuit breaker around backend calls."""

from __future__ import annotations

import pytest

from blamequeue._resilience import CircuitBreaker, Guard, RetryPolicy
from blamequeue.errors import BackendUnavailableError, BadArgumentError, QueueError
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio


class Flaky:
    """Fails the first ``failures`` calls with a retryable error."""

    def __init__(self, failures: int, error: QueueError | None = None) -> None:
        self.failures = failures
        self.calls = 0
        self.error = error or BackendUnavailableError("store is restarting")

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def make_guard(
    clock: VirtualClock, *, attempts: int = 3, threshold: int = 2
) -> tuple[Guard, list[str]]:
    changes: list[str] = []

    async def on_change(state: str) -> None:
        changes.append(state)

    breaker = CircuitBreaker(
        failure_threshold=threshold, reset_timeout=30.0, clock=clock, on_change=on_change
    )
    return Guard("b", RetryPolicy(attempts=attempts, base=0.0, cap=0.0), breaker), changes


async def test_retryable_errors_are_retried_until_success() -> None:
    guard, _ = make_guard(VirtualClock())
    flaky = Flaky(2)
    assert await guard.call("op", flaky) == "ok"
    assert flaky.calls == 3
    assert guard.breaker.state == "closed"


async def test_non_retryable_errors_are_not_retried_and_do_not_trip_the_breaker() -> None:
    guard, _ = make_guard(VirtualClock(), threshold=1)
    flaky = Flaky(5, BadArgumentError("queue/bad-argument", "no"))
    with pytest.raises(BadArgumentError):
        await guard.call("op", flaky)
    assert flaky.calls == 1
    assert guard.breaker.state == "closed"


async def test_breaker_opens_after_threshold_fails_fast_then_half_opens_and_closes() -> None:
    clock = VirtualClock()
    guard, changes = make_guard(clock, attempts=1, threshold=2)
    down = Flaky(2)
    for _ in range(2):
        with pytest.raises(BackendUnavailableError):
            await guard.call("op", down)
    assert guard.breaker.state == "open"
    assert changes == ["open"]

    with pytest.raises(QueueError) as info:  # fails fast, backend not called
        await guard.call("op", down)
    assert info.value.code == "queue/backend-unavailable"
    assert "circuit breaker is open" in info.value.message
    assert down.calls == 2

    clock.advance(30)
    assert guard.breaker.state == "half-open"
    assert await guard.call("op", down) == "ok"
    assert guard.breaker.state == "closed"
    assert changes == ["open", "closed"]


async def test_a_failure_while_half_open_reopens_at_once() -> None:
    clock = VirtualClock()
    guard, changes = make_guard(clock, attempts=1, threshold=3)
    down = Flaky(10)
    for _ in range(3):
        with pytest.raises(BackendUnavailableError):
            await guard.call("op", down)
    clock.advance(31)
    with pytest.raises(BackendUnavailableError):
        await guard.call("op", down)
    assert guard.breaker.state == "open"
    assert changes == ["open"]


async def test_a_foreign_exception_from_a_backend_is_mapped_not_leaked() -> None:
    guard, _ = make_guard(VirtualClock())

    async def broken() -> None:
        raise KeyError("oops")

    with pytest.raises(QueueError) as info:
        await guard.call("lease", broken)
    assert info.value.code == "queue/backend-unavailable"
    assert "lease" in info.value.message
    assert isinstance(info.value.__cause__, KeyError)
