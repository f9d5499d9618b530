"""Three scheduler processes (asyncio and trio) on one Redis server: every one-second slot
fires exactly once, and none is missed while they run."""

from __future__ import annotations

from pathlib import Path

from redis_helpers import config

from scheduler_processes import run_schedulers


def test_three_schedulers_fire_each_slot_once(redis_url: str, tmp_path: Path) -> None:
    slots, jobs = run_schedulers(config(redis_url), tmp_path, processes=3, seconds=4.0)
    assert len(slots) >= 2
    assert jobs == len(slots)  # one job per slot
    assert slots == [slots[0] + n for n in range(len(slots))]  # no slot missed, none twice
