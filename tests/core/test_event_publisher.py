"""The publisher behind ``Queue.watch`` holds at most MAX_HELD events: past that it drops the
oldest, and says so only when someone watches the queue (a busy queue nobody watches raises
more than that between two looks, and those events were never going anywhere)."""

from __future__ import annotations

import logging

import pytest

from blamequeue import Queue
from blamequeue._queue_watch import MAX_HELD, EventPublisher

pytestmark = pytest.mark.anyio


def _publisher(queue: Queue) -> EventPublisher:
    publisher = queue._runtimes["m"].publisher
    assert publisher is not None
    return publisher


def _flood(publisher: EventPublisher, name: str) -> None:
    for n in range(MAX_HELD + 50):  # no checkpoint in between: nothing is written meanwhile
        publisher.offer(name, "job.added", at=float(n), job_id=f"job-{n}", data={})


async def test_dropping_is_silent_while_nobody_watches_and_said_when_someone_does(
    caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    async with Queue(backends={"m": {"protocol": "memory"}}) as queue:
        publisher = _publisher(queue)
        publisher.offer("quiet", "job.added", at=0.0, job_id="job-0", data={})
        await publisher.flush()  # looks: nobody watches "quiet"
        with caplog.at_level(logging.WARNING, logger="blamequeue"):
            _flood(publisher, "quiet")
        assert publisher.dropped == 0
        assert "dropped" not in caplog.text
        await publisher.flush()
        async with queue.watch("watched"):
            with caplog.at_level(logging.WARNING, logger="blamequeue"):
                _flood(publisher, "watched")
        assert publisher.dropped >= 50
        assert "queue event(s) for watchers dropped" in caplog.text
