"""Shared test configuration: every async test runs on asyncio and on trio."""

from __future__ import annotations

import pytest

# The conformance suite's modules are registered for assert rewriting by its public module; a
# test that takes a helper from them directly may be collected first, so register them here.
pytest.register_assert_rewrite("blamequeue_testing._conformance")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
