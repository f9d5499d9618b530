"""The blamequeue conformance suite against the example's protocols: ``jsonfile-basic`` (the
required class alone) and ``jsonfile`` (with its facets).

This is all a backend author writes: import the suite and say how to build the backend.  Every
test runs on asyncio and on trio; tests of what the backend lacks are skipped, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blamequeue_testing.conformance import *  # noqa: F403


@pytest.fixture(params=["jsonfile-basic", "jsonfile"])
def bq_backend_config(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    # Both protocols of the example: the required class alone, then with its facets.  A fresh
    # file per test.  No seal key: the queue keeps one beside the file (jobs.json.key).
    return {"protocol": request.param, "path": str(tmp_path / "jobs.json")}
