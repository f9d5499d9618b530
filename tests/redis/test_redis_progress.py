"""Results and progress events across processes through one Redis server (SPEC §10): the
subscriber and the result waiter here, the worker in another process."""

from __future__ import annotations

import pytest
from redis_helpers import config

from cross_process_events import run_elsewhere_and_watch
from cross_process_watch import EXPECTED, watch_a_producer_and_a_worker

pytestmark = pytest.mark.anyio


async def test_a_subscriber_sees_another_processs_progress_and_result(redis_url: str) -> None:
    events, result, pid = await run_elsewhere_and_watch(config(redis_url))
    assert [(e.kind, e.percent, e.data) for e in events] == [
        ("progress", 30.0, {"step": 1}),
        ("progress", 70.0, {"step": 2}),
        ("finished", None, None),
    ]
    assert events[-1].state == "done"
    assert result == {"pid": pid}


async def test_a_watch_sees_a_producer_and_a_worker_process_in_order_per_job(
    redis_url: str,
) -> None:
    assert await watch_a_producer_and_a_worker(config(redis_url)) == EXPECTED
