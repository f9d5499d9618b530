"""Retry delays: the default schedule, every strategy, and reproducible jitter."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest

from blamequeue import (
    ExponentialBackoff,
    FixedBackoff,
    LinearBackoff,
    QueueError,
    ScheduleBackoff,
)
from blamequeue._backoff import _STRATEGIES, parse_backoff


def test_default_backoff_doubles_from_one_second_and_caps_at_five_minutes() -> None:
    backoff = parse_backoff(None)
    delays = [backoff.delay(n, "job-x") for n in range(1, 12)]
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_default_backoff_survives_huge_attempt_numbers() -> None:
    assert ExponentialBackoff().delay(100_000, "job-x") == 300


def test_exponential_backoff_takes_base_factor_and_cap() -> None:
    backoff = parse_backoff({"strategy": "exponential", "base": 0.5, "factor": 3, "cap": 10})
    assert [backoff.delay(n, "j") for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10]


def test_fixed_backoff_waits_the_same_every_time() -> None:
    backoff = parse_backoff({"strategy": "fixed", "delay": 7})
    assert isinstance(backoff, FixedBackoff)
    assert {backoff.delay(n, "j") for n in range(1, 6)} == {7}


def test_linear_backoff_grows_by_its_step() -> None:
    backoff = parse_backoff({"strategy": "linear", "base": 2, "step": 3, "cap": 9})
    assert isinstance(backoff, LinearBackoff)
    assert [backoff.delay(n, "j") for n in (1, 2, 3, 4)] == [2, 5, 8, 9]


def test_schedule_backoff_follows_the_list_then_repeats_its_last_delay() -> None:
    backoff = parse_backoff([10, 30, 60])
    assert isinstance(backoff, ScheduleBackoff)
    assert [backoff.delay(n, "j") for n in (1, 2, 3, 4, 9)] == [10, 30, 60, 60, 60]


@pytest.mark.parametrize("name", sorted(_STRATEGIES))
def test_every_strategy_derives_its_jitter_from_a_hash_of_job_id_and_attempt(name: str) -> None:
    required: dict[str, dict[str, Any]] = {
        "fixed": {"delay": 40},
        "schedule": {"schedule": [40, 80]},
    }
    options = {"strategy": name, **required.get(name, {})}
    plain, jittered = parse_backoff(options), parse_backoff({**options, "jitter": 0.5})
    for job_id in ("job-a", "job-b"):
        for attempt in (1, 2, 3):
            digest = hashlib.blake2b(f"{job_id}:{attempt}".encode(), digest_size=8).digest()
            fraction = int.from_bytes(digest, "big") / 2**64
            full = plain.delay(attempt, job_id)
            assert jittered.delay(attempt, job_id) == full * (1.0 - 0.5 * fraction)


def test_jitter_is_reproducible_from_job_id_and_attempt() -> None:
    backoff = ExponentialBackoff(jitter=0.5)
    first = [backoff.delay(n, "job-a") for n in range(1, 8)]
    assert first == [backoff.delay(n, "job-a") for n in range(1, 8)]
    assert first != [backoff.delay(n, "job-b") for n in range(1, 8)]


def test_jitter_only_shortens_and_stays_within_its_fraction() -> None:
    backoff = FixedBackoff(delay=100, jitter=0.25)
    delays = [backoff.delay(n, f"job-{i}") for i in range(200) for n in (1, 2)]
    assert all(75 <= d <= 100 for d in delays)
    assert len(set(delays)) > 100  # actually spread out


def test_strategies_round_trip_through_their_spec() -> None:
    for backoff in (
        ExponentialBackoff(base=2, factor=3, cap=50, jitter=0.1),
        FixedBackoff(delay=3),
        LinearBackoff(base=1, step=2, cap=20),
        ScheduleBackoff(schedule=[1, 2, 3], jitter=0.2),
    ):
        assert parse_backoff(backoff.to_spec()) == backoff


@pytest.mark.parametrize(
    "spec",
    [
        {"strategy": "exponential", "base": -1},
        {"strategy": "exponential", "cap": math.nan},
        {"strategy": "fixed", "delay": math.inf},
        {"strategy": "linear", "jitter": 2},
        [],
        [1, -5],
    ],
)
def test_bad_backoff_numbers_are_refused_with_bad_argument(spec: object) -> None:
    with pytest.raises(QueueError) as info:
        parse_backoff(spec)
    assert info.value.code == "queue/bad-argument"


def test_unknown_strategy_is_a_bad_argument_naming_the_choices() -> None:
    with pytest.raises(QueueError) as info:
        parse_backoff({"strategy": "fibonacci"})
    assert info.value.code == "queue/bad-argument"
    assert "exponential" in info.value.message


def test_a_backoff_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(QueueError) as info:
        parse_backoff("fast")
    assert info.value.code == "queue/bad-argument"
