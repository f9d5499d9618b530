"""The blamequeue conformance suite against protocol ``jsonfile``.

This is all a backend author writes: import the suite and say how to build the backend.  Every
test runs on asyncio and on trio; tests the backend's capabilities exclude are skipped, saying
why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blamequeue_testing.conformance import *  # noqa: F403


@pytest.fixture
def bq_backend_config(tmp_path: Path) -> dict[str, Any]:
    # A fresh file per test.  No seal key: the queue keeps one beside the file (jobs.json.key).
    return {"protocol": "jsonfile", "path": str(tmp_path / "jobs.json")}
