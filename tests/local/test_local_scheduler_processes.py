"""Three scheduler processes (asyncio and trio) on one SQLite file: every one-second slot
fires exactly once, and none is missed while they run."""

from __future__ import annotations

from pathlib import Path

from scheduler_processes import run_schedulers


def test_three_schedulers_fire_each_slot_once(tmp_path: Path) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    slots, jobs = run_schedulers(config, tmp_path, processes=3, seconds=4.0)
    assert len(slots) >= 2
    assert jobs == len(slots)  # one job per slot
    assert slots == [slots[0] + n for n in range(len(slots))]  # no slot missed, none twice
