"""SPEC §2 ``list_backends`` and §3.10: the backend's status and its circuit breaker."""

from __future__ import annotations

import pytest

from blamequeue import BackendStatus

from .fixtures import BACKEND, Conformance

__all__ = ["TestBackendStatus"]


@pytest.mark.anyio
class TestBackendStatus:
    async def test_list_backends_shows_a_closed_breaker(self, conformance: Conformance) -> None:
        protocol = conformance.factory.config["protocol"]
        assert conformance.queue.list_backends() == [
            BackendStatus(name=BACKEND, protocol=protocol, breaker_state="closed")
        ]

    async def test_breaker_stays_closed_through_normal_work(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2, 3])
        await q.tick(name, _fail_one, max=3)
        await q.size(name)
        [status] = q.list_backends()
        assert status.breaker_state == "closed"


async def _fail_one(job: object, ctx: object) -> None:
    if getattr(job, "payload", None) == 2:
        raise RuntimeError("a handler failure is not a backend failure")
