"""Flushing the metrics buffer: a flush that starts while another is writing waits for it, so
once any flush returns, every settlement observed before it is in the backend.

Regression: the background flush could take the buffer and write the counts; a ``tick`` ending
meanwhile found the buffer empty and returned at once, and a reader in another process saw the
counts without the errors (a flaky conformance test on the loaded CI machine).
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from blamequeue import Queue
from blamequeue._metrics import flush_metrics
from blamequeue._plugins import Registration, load_registry
from blamequeue_testing._memory import MemoryBackend

pytestmark = pytest.mark.anyio


class SlowRecordsBackend(MemoryBackend):
    """A memory backend whose record writes take a while, like a round trip to a server."""

    protocol = "slow-records-memory"
    written: ClassVar[int] = 0

    async def record_put(self, *args: Any, **kwargs: Any) -> Any:
        await anyio.sleep(0.05)
        record = await super().record_put(*args, **kwargs)
        SlowRecordsBackend.written += 1
        return record


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        load_registry().protocols,
        SlowRecordsBackend.protocol,
        Registration(value=SlowRecordsBackend, plugin="tests"),
    )
    monkeypatch.setattr(SlowRecordsBackend, "written", 0)


async def test_a_flush_during_another_waits_until_everything_is_written() -> None:
    async with Queue(backends={"m": {"protocol": SlowRecordsBackend.protocol}}) as queue:
        runtime = queue._runtime(None)
        runtime.metrics.observe(
            queue="q",
            job_id="job-1",
            outcome="dead",
            at=runtime.clock.now(),
            duration=0.5,
            attempts=1,
            error="card declined",
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(flush_metrics, runtime)  # takes the buffer, then writes slowly
            await anyio.sleep(0.01)
            await flush_metrics(runtime)  # nothing left to take: it waits for the first
            assert SlowRecordsBackend.written == 1  # the error is in the backend
            metrics = await queue.metrics("q", window=600)
        assert (metrics.failed, metrics.dead) == (1, 1)
        [error] = metrics.recent_errors
        assert error.error == "card declined"
