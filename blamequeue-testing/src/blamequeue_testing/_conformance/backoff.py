"""SPEC §3.3: retry delays after a failed attempt (default, per backend, per job, jitter).

Each test fails a job again and again and checks, for every retry, that the job is not leasable
a millisecond before its delay has passed and is leasable exactly when it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from blamequeue import (
    ExponentialBackoff,
    FixedBackoff,
    Job,
    JobContext,
    LinearBackoff,
    Queue,
)
from blamequeue._backoff import parse_backoff

from .fixtures import Conformance

__all__ = ["TestBackoff"]

_EARLY = 0.001


def _require_checkable_retry_delays(conformance: Conformance) -> None:
    """Skip unless the backend delays retries on the queue's clock, which the test moves."""
    conformance.require("delay", "retry delays cannot be checked")
    conformance.require_virtual_time("retry delays are checked by moving the clock")


async def _fail_and_check_delays(
    conformance: Conformance,
    delays: Sequence[float] | None = None,
    *,
    queue: Queue | None = None,
    expected: Callable[[int, str], float] | None = None,
    retries: int = 0,
    **enqueue_options: Any,
) -> str:
    """Enqueue one job, fail it ``len(delays) + 1`` times and check each retry delay.

    ``expected(attempt, job_id)`` may compute the delays instead of ``delays`` (jitter).
    Returns the job id.
    """
    q = queue or conformance.queue
    name = conformance.name
    count = len(delays) if delays is not None else retries
    job_id = await q.enqueue(name, "flaky", max_attempts=count + 1, **enqueue_options)
    attempts: list[int] = []

    async def boom(job: Job, ctx: JobContext) -> None:
        attempts.append(job.attempts)
        raise RuntimeError(f"failure {job.attempts}")

    first = await q.tick(name, boom)
    assert first.leased == 1
    assert first.failed == 1
    failed_at = conformance.now()
    for attempt in range(1, count + 1):
        if delays is not None:
            delay = delays[attempt - 1]
        else:
            assert expected is not None
            delay = expected(attempt, job_id)
        due = failed_at + delay
        conformance.advance_to(due - _EARLY)
        early = await q.tick(name, boom)
        assert early.leased == 0, f"leased before the {delay} s delay after failure {attempt}"
        conformance.advance_to(due)
        on_time = await q.tick(name, boom)
        assert on_time.leased == 1, f"not leasable {delay} s after failure {attempt}"
        failed_at = conformance.now()
    assert attempts == list(range(1, count + 2))
    return job_id


@pytest.mark.anyio
class TestBackoff:
    async def test_default_backoff_doubles_from_one_second(self, conformance: Conformance) -> None:
        conformance.require_default("backoff")
        _require_checkable_retry_delays(conformance)
        await _fail_and_check_delays(conformance, [1, 2, 4, 8, 16])

    async def test_default_backoff_is_capped_at_300_seconds(self, conformance: Conformance) -> None:
        conformance.require_default("backoff")
        _require_checkable_retry_delays(conformance)
        await _fail_and_check_delays(conformance, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300])

    async def test_fixed_backoff_from_backend_config(self, conformance: Conformance) -> None:
        _require_checkable_retry_delays(conformance)
        async with conformance.factory.open(backoff={"strategy": "fixed", "delay": 5}) as q:
            await _fail_and_check_delays(conformance, [5, 5, 5], queue=q)

    async def test_linear_backoff_from_backend_config(self, conformance: Conformance) -> None:
        _require_checkable_retry_delays(conformance)
        config = {"strategy": "linear", "base": 2, "step": 3, "cap": 9}
        async with conformance.factory.open(backoff=config) as q:
            await _fail_and_check_delays(conformance, [2, 5, 8, 9, 9], queue=q)

    async def test_schedule_backoff_from_backend_config(self, conformance: Conformance) -> None:
        _require_checkable_retry_delays(conformance)
        async with conformance.factory.open(backoff=[10, 30, 60]) as q:
            await _fail_and_check_delays(conformance, [10, 30, 60, 60], queue=q)

    async def test_exponential_backoff_with_base_factor_and_cap_from_backend_config(
        self, conformance: Conformance
    ) -> None:
        _require_checkable_retry_delays(conformance)
        config = {"strategy": "exponential", "base": 0.5, "factor": 3, "cap": 10}
        async with conformance.factory.open(backoff=config) as q:
            await _fail_and_check_delays(conformance, [0.5, 1.5, 4.5, 10, 10], queue=q)

    async def test_job_backoff_list_sets_its_retry_delays(self, conformance: Conformance) -> None:
        conformance.require_default("backoff")
        _require_checkable_retry_delays(conformance)
        await _fail_and_check_delays(conformance, [3, 7, 7], backoff=[3, 7])

    async def test_job_backoff_overrides_backend_backoff(self, conformance: Conformance) -> None:
        _require_checkable_retry_delays(conformance)
        async with conformance.factory.open(backoff={"strategy": "fixed", "delay": 50}) as q:
            await _fail_and_check_delays(
                conformance, [2, 2], queue=q, backoff={"strategy": "fixed", "delay": 2}
            )

    async def test_job_backoff_accepts_a_strategy_object(self, conformance: Conformance) -> None:
        conformance.require_default("backoff")
        _require_checkable_retry_delays(conformance)
        await _fail_and_check_delays(conformance, [4, 4], backoff=FixedBackoff(delay=4))

    async def test_jittered_delay_is_reproducible_from_job_id_and_attempt(
        self, conformance: Conformance
    ) -> None:
        _require_checkable_retry_delays(conformance)
        strategy = ExponentialBackoff(base=10, factor=2, cap=300, jitter=0.5)
        async with conformance.factory.open(backoff=strategy.to_spec()) as q:
            job_id = await _fail_and_check_delays(
                conformance, queue=q, expected=strategy.delay, retries=4
            )
        again = ExponentialBackoff(base=10, factor=2, cap=300, jitter=0.5)
        assert [again.delay(n, job_id) for n in range(1, 5)] == [
            strategy.delay(n, job_id) for n in range(1, 5)
        ]

    async def test_jitter_of_every_strategy_is_reproducible_from_job_id_and_attempt(
        self, conformance: Conformance
    ) -> None:
        _require_checkable_retry_delays(conformance)
        for strategy in (
            FixedBackoff(delay=20, jitter=0.5),
            LinearBackoff(base=10, step=10, cap=60, jitter=0.5),
            parse_backoff({"strategy": "schedule", "schedule": [15, 45], "jitter": 0.5}),
        ):
            await _fail_and_check_delays(
                conformance, expected=strategy.delay, retries=2, backoff=strategy.to_spec()
            )

    async def test_jittered_delays_stay_within_bounds_and_spread(
        self, conformance: Conformance
    ) -> None:
        strategy = ExponentialBackoff(base=10, factor=2, cap=300, jitter=0.5)
        ids = await conformance.queue.enqueue_many(conformance.name, list(range(40)))
        for attempt in (1, 2, 3):
            full = min(10 * 2 ** (attempt - 1), 300)
            delays = [strategy.delay(attempt, job_id) for job_id in ids]
            assert all(full * 0.5 <= d <= full for d in delays), delays
            assert len(set(delays)) > len(ids) // 2, "jitter does not spread retries"

    async def test_retry_is_not_due_before_its_backoff(self, conformance: Conformance) -> None:
        conformance.require_default("backoff")
        _require_checkable_retry_delays(conformance)
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x", max_attempts=3)

        async def boom(job: Job, ctx: JobContext) -> None:
            raise RuntimeError("boom")

        await q.tick(name, boom)
        failed_at = conformance.now()
        conformance.advance_to(failed_at + 0.999)
        assert await conformance.leasable() == 0
        conformance.advance_to(failed_at + 1.0)
        assert await conformance.leasable() == 1
