"""The conformance suite as a downstream author meets it (SPEC §8).

A module of their own holding only the star import and ``bq_backend_config`` returning
``{"protocol": "memory"}``, run with plain pytest from a directory outside this repository (no
conftest, no options), passes: the tests that stand a second queue in for another process share
the store through a namespace the suite gives the test.  The other tests here pin the pieces:
the per-test namespace, and the skip a backend that keeps a store per queue gets instead of a
failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from blamequeue import Queue
from blamequeue_testing import MemoryBackend, VirtualClock
from blamequeue_testing._conformance.fixtures import (
    AuditRecorder,
    Conformance,
    QueueFactory,
    backend_capabilities,
)

DOWNSTREAM_MODULE = """\
from blamequeue_testing.conformance import *  # noqa: F403
import pytest
@pytest.fixture
def bq_backend_config():
    return {"protocol": "memory"}
"""


def test_the_suite_passes_for_a_downstream_module_with_the_default_memory_config(
    tmp_path: Path,
) -> None:
    # The whole suite on memory takes a few seconds, so all of it runs (no -k subset).
    (tmp_path / "test_my_backend.py").write_text(DOWNSTREAM_MODULE)
    # Nothing of this run's pytest set-up may leak into the downstream one.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr
    summary = run.stdout.strip().splitlines()[-1]  # e.g. "952 passed, 30 skipped in 6.01s"
    assert re.match(r"\d+ passed", summary), summary
    assert "failed" not in summary, summary
    assert "error" not in summary, summary


def _factory(config: Mapping[str, Any]) -> QueueFactory:
    return QueueFactory(config, VirtualClock(), AuditRecorder())


@pytest.mark.anyio
async def test_every_queue_of_one_test_shares_a_memory_store_of_its_own() -> None:
    factory, neighbour = _factory({"protocol": "memory"}), _factory({"protocol": "memory"})
    namespace = factory.config["namespace"]
    assert namespace != neighbour.config["namespace"]
    try:
        async with factory.open() as first, factory.open() as second:
            await first.enqueue("q", "seen by the second queue")
            assert await second.size("q") == 1
            async with neighbour.open() as elsewhere:  # another test
                assert await elsewhere.size("q") == 0
    finally:
        await factory.aclose()
        await neighbour.aclose()
    # The test's namespace is dropped with it: a backend built on it later starts empty.
    async with Queue(backends={"m": {"protocol": "memory", "namespace": namespace}}) as later:
        assert await later.size("q") == 0


@pytest.mark.anyio
async def test_a_namespace_the_config_gives_is_kept_and_left_to_its_owner() -> None:
    namespace = "conformance-downstream-owned"
    factory = _factory({"protocol": "memory", "namespace": namespace})
    try:
        assert factory.config["namespace"] == namespace
        async with factory.open() as queue:
            await queue.enqueue("q", "kept")
        await factory.aclose()
        async with Queue(backends={"m": {"protocol": "memory", "namespace": namespace}}) as q:
            assert await q.size("q") == 1
    finally:
        MemoryBackend.forget_namespace(namespace)


@pytest.mark.anyio
async def test_queues_that_do_not_share_a_store_skip_the_test_saying_why() -> None:
    config = {"protocol": "memory"}
    factory = _factory(config)
    apart = "conformance-downstream-apart"
    try:
        async with factory.open() as queue, factory.open(namespace=apart) as other:
            conformance = Conformance(
                queue=queue,
                clock=factory.clock,
                audit=factory.audit,
                factory=factory,
                capabilities=backend_capabilities(config),
            )
            assert not await conformance.shares_store(queue, other)
            with pytest.raises(pytest.skip.Exception, match="do not share one store"):
                await conformance.require_shared_store(queue, other)
            assert await queue.size(f"{conformance.name}-probe") == 0  # the probe is gone
    finally:
        await factory.aclose()
        MemoryBackend.forget_namespace(apart)
