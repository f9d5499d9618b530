"""The conformance suite against the ``local`` (SQLite) backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("blamequeue_local", reason="blamequeue-local is not installed")

from blamequeue_testing.conformance import *  # noqa: F403


@pytest.fixture
def bq_backend_config(tmp_path: Path) -> dict[str, Any]:
    return {"protocol": "local", "path": str(tmp_path / "conformance.db")}
