"""VirtualClock: time passes only when a test advances it."""

from __future__ import annotations

import math

import anyio
import pytest

from blamequeue.abc import Clock
from blamequeue.errors import BadArgumentError
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio


async def _settle() -> None:
    await anyio.wait_all_tasks_blocked()


def test_starts_at_the_given_epoch_time() -> None:
    assert VirtualClock().now() == 1_700_000_000.0
    assert VirtualClock(start=10).now() == 10.0


def test_is_a_clock() -> None:
    clock: Clock = VirtualClock()
    assert isinstance(clock.now(), float)


def test_advance_moves_now_forward() -> None:
    clock = VirtualClock(start=100.0)
    clock.advance(2.5)
    clock.advance(0)
    assert clock.now() == 102.5


def test_set_moves_to_a_timestamp() -> None:
    clock = VirtualClock(start=100.0)
    clock.set(150.0)
    assert clock.now() == 150.0


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, "1", None, True])
def test_advance_refuses_bad_input(bad: object) -> None:
    clock = VirtualClock(start=100.0)
    with pytest.raises(BadArgumentError) as info:
        clock.advance(bad)  # type: ignore[arg-type]
    assert info.value.code == "queue/bad-argument"
    assert clock.now() == 100.0


def test_set_refuses_going_backwards() -> None:
    clock = VirtualClock(start=100.0)
    with pytest.raises(BadArgumentError) as info:
        clock.set(99.0)
    assert info.value.code == "queue/bad-argument"


@pytest.mark.parametrize("bad", [math.nan, math.inf, "x"])
def test_start_must_be_a_finite_number(bad: object) -> None:
    with pytest.raises(BadArgumentError):
        VirtualClock(start=bad)  # type: ignore[arg-type]


async def test_sleep_does_not_return_before_time_is_advanced() -> None:
    clock = VirtualClock()
    woke = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep(10)
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await _settle()
        assert not woke.is_set()
        assert clock.pending_sleepers == 1
        clock.advance(9.999)
        await _settle()
        assert not woke.is_set()
        clock.advance(0.001)
        await woke.wait()
    assert clock.pending_sleepers == 0


async def test_sleep_zero_or_negative_returns_at_once() -> None:
    clock = VirtualClock()
    await clock.sleep(0)
    await clock.sleep(-5)
    assert clock.pending_sleepers == 0


async def test_sleep_refuses_nan() -> None:
    with pytest.raises(BadArgumentError):
        await VirtualClock().sleep(math.nan)


async def test_advance_wakes_sleepers_in_deadline_order() -> None:
    clock = VirtualClock(start=0.0)
    woken: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append(seconds)

    async with anyio.create_task_group() as tg:
        for seconds in (3.0, 1.0, 5.0, 2.0, 4.0):
            tg.start_soon(sleeper, seconds)
        await _settle()
        clock.advance(3.5)
        await _settle()
        assert woken == [1.0, 2.0, 3.0]
        clock.advance(10)
    assert woken == [1.0, 2.0, 3.0, 4.0, 5.0]


async def test_advance_keeps_deadline_order_across_separate_advances() -> None:
    clock = VirtualClock(start=0.0)
    woken: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "early", 1.0)
        tg.start_soon(sleeper, "late", 2.0)
        await _settle()
        clock.advance(1)  # no checkpoint in between: both woken before either runs
        clock.advance(1)
    assert woken == ["early", "late"]


async def test_equal_deadlines_wake_in_call_order() -> None:
    clock = VirtualClock(start=0.0)
    woken: list[int] = []

    async def sleeper(n: int) -> None:
        await clock.sleep(1)
        woken.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(sleeper, n)
            await _settle()  # fix the order of the sleep() calls
        clock.advance(1)
    assert woken == [0, 1, 2, 3, 4]


async def test_cancelled_sleeper_is_forgotten_and_does_not_block_others() -> None:
    clock = VirtualClock(start=0.0)
    woken: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append(name)

    doomed = anyio.CancelScope()

    async def cancellable() -> None:
        with doomed:
            await clock.sleep(1.0)
            woken.append("cancelled")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "kept", 2.0)
        tg.start_soon(cancellable)
        await _settle()
        assert clock.pending_sleepers == 2
        doomed.cancel()
        await _settle()
        assert clock.pending_sleepers == 1
        clock.advance(5)
    assert woken == ["kept"]


async def test_sleeper_sees_the_advanced_time() -> None:
    clock = VirtualClock(start=0.0)
    seen: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(1)
        seen.append(clock.now())

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await _settle()
        clock.advance(7)
    assert seen == [7.0]


async def test_advance_and_settle_stops_at_every_deadline_on_the_way() -> None:
    clock = VirtualClock(start=0.0)
    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            await clock.sleep(10)
            ticks.append(clock.now())

    async with anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        await _settle()
        await clock.advance_and_settle(35)
        assert ticks == [10.0, 20.0, 30.0]
        assert clock.now() == 35.0
        tg.cancel_scope.cancel()


async def test_advance_and_settle_refuses_bad_input() -> None:
    clock = VirtualClock()
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(BadArgumentError):
            await clock.advance_and_settle(bad)
