"""Every log record about a job carries the job's ``job_id``, ``queue``, ``attempt`` and
``backend`` as ``extra`` fields: a failing job's records, from its first failure (with a
backoff function that raises) to the dead-letter queue, on both loops.  A record about several
jobs at once carries ``job_ids``, ``count``, ``queue`` and ``backend``, in its JSON line too."""

from __future__ import annotations

import json
import logging

import pytest

from blamequeue import Job, JobContext, Queue
from blamequeue._cli._log_format import JsonLogFormatter
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio


async def test_a_failing_jobs_records_carry_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    queue = Queue(backends={"primary": {"protocol": "memory"}}, clock=clock, sweep_interval=0)

    async def refuse(job: Job, ctx: JobContext) -> None:
        raise ValueError("refused")

    def broken_backoff(attempt: int, error: BaseException) -> float:
        raise RuntimeError("no delay today")

    caplog.set_level(logging.DEBUG, logger="blamequeue")
    async with queue:
        job_id = await queue.enqueue("emails", "hello", max_attempts=2)
        await queue.tick("emails", refuse, backoff=broken_backoff)
        clock.advance(3600)
        await queue.tick("emails", refuse, backoff=broken_backoff)
    about = [r for r in caplog.records if job_id in r.getMessage()]
    fields = [(r.job_id, r.queue, r.attempt, r.backend) for r in about]  # type: ignore[attr-defined]
    assert {f[:2] + f[3:] for f in fields} == {(job_id, "emails", "primary")}
    assert {f[2] for f in fields} == {1, 2}
    messages = " | ".join(r.getMessage() for r in about)
    for what in ("backoff function", "failed (attempt 1 of 2)", "dead-letter", "sent to the DLQ"):
        assert what in messages


async def test_a_record_about_several_jobs_carries_their_ids_in_its_json_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    queue = Queue(backends={"primary": {"protocol": "memory"}}, clock=clock, sweep_interval=0)

    async def outlive(job: Job, ctx: JobContext) -> None:
        if job.id == first:  # both leases run out while this handler runs
            clock.advance(31)
            await queue.sweep()

    caplog.set_level(logging.WARNING, logger="blamequeue")
    async with queue:
        first = await queue.enqueue("emails", "a")
        second = await queue.enqueue("emails", "b", max_attempts=1)
        await queue.tick("emails", outlive, max=2, lease=30)
    [swept] = [r for r in caplog.records if "expired lease" in r.getMessage()]
    line = json.loads(JsonLogFormatter().format(swept))
    assert sorted(line.pop("job_ids")) == sorted([first, second])
    assert {key: line[key] for key in ("count", "queue", "backend")} == {
        "count": 2,
        "queue": "emails",
        "backend": "primary",
    }
    assert "1 back to pending, 1 dead-lettered" in line["message"]
