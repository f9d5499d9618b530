"""Shared test configuration: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The conformance suite's modules are registered for assert rewriting by its public module; a
# test that takes a helper from them directly may be collected first, so register them here.
pytest.register_assert_rewrite("blamequeue_testing._conformance")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of every distribution, built once a run (for the install tests: they install
    from it as from a package index).  Every xdist worker of a run shares the folder above its
    own base temp, so the first to ask builds and the others wait for it."""
    from install_commands import build_wheelhouse

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return build_wheelhouse(shared / "wheelhouse")
