"""Results and progress events across processes on one SQLite file (SPEC §10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cross_process_events import run_elsewhere_and_watch

pytestmark = pytest.mark.anyio


async def test_a_subscriber_sees_another_processs_progress_and_result(tmp_path: Path) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    events, result, pid = await run_elsewhere_and_watch(config)
    assert [(e.kind, e.percent, e.data) for e in events] == [
        ("progress", 30.0, {"step": 1}),
        ("progress", 70.0, {"step": 2}),
        ("finished", None, None),
    ]
    assert events[-1].state == "done"
    assert result == {"pid": pid}
