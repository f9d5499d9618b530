"""Cancel across processes on one SQLite file: a handler running in another worker process is
cancelled by ``Queue.cancel`` in this one (the worker hears of it at its next heartbeat)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cross_process_cancel import cancel_running_job_in_another_process

pytestmark = pytest.mark.anyio


async def test_cancel_stops_a_handler_running_in_another_process(
    tmp_path: Path, anyio_backend: str
) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    await cancel_running_job_in_another_process(config, tmp_path, anyio_backend)
