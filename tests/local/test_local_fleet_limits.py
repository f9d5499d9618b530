"""Fleet-wide limits with several worker processes on one SQLite file (SPEC §11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_limits import check_fleet, run_fleet

pytestmark = pytest.mark.anyio


async def test_worker_processes_keep_group_concurrency_and_the_fleet_rate(
    tmp_path: Path,
) -> None:
    events = await run_fleet({"protocol": "local", "path": str(tmp_path / "fleet.db")}, tmp_path)
    check_fleet(events)
