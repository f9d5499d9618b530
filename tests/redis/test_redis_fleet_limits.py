"""Fleet-wide limits with several worker processes on one Redis server (SPEC §11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis_helpers import config

from fleet_limits import check_fleet, run_fleet

pytestmark = pytest.mark.anyio


async def test_worker_processes_keep_group_concurrency_and_the_fleet_rate(
    redis_url: str, tmp_path: Path
) -> None:
    check_fleet(await run_fleet(config(redis_url), tmp_path))
