"""A job's id is ``job_id`` on every value that describes a job, and ``id`` on the job's own
records; each of ``Job``, ``JobInfo`` and ``DeadLetter`` answers both names with one value."""

from __future__ import annotations

import pytest

from blamequeue import Job, JobContext, Queue

pytestmark = pytest.mark.anyio


async def test_a_job_its_info_and_its_dead_letter_answer_both_names() -> None:
    seen: list[Job] = []

    async def fail(job: Job, ctx: JobContext) -> None:
        seen.append(job)
        raise RuntimeError("boom")

    async with Queue({"default": {"protocol": "memory", "max_attempts": 1}}) as queue:
        job_id = await queue.enqueue("q", {"n": 1})
        assert (await queue.tick("q", fail)).failed == 1
        [job] = seen
        assert job.id == job.job_id == job_id
        info = await queue.job_info(job_id)
        assert info is not None
        assert info.job.id == info.job_id == job_id
        [letter] = await queue.dlq_list("q")
        assert letter.job_id == letter.id == job_id
