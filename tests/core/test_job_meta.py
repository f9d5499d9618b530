"""A job's meta, typed (_job_meta.JobMeta): what each key reads as, and that a worker parses a
job's meta once per attempt."""

from __future__ import annotations

from typing import Any

import pytest

from blamequeue import Job, JobContext, Queue
from blamequeue._job_meta import JobMeta


@pytest.mark.parametrize("text", [None, "", "not json", "[1]", '"text"', "{"])
def test_a_missing_or_unreadable_meta_reads_as_empty(text: str | None) -> None:
    assert JobMeta.parse(text) == JobMeta()


def test_each_key_reads_as_its_owner_wrote_it() -> None:
    text = (
        '{"task":"send","context":"bq1:k:sealed","batch":"batch-1","flow_name":"b",'
        '"backoff":[1,2],"timeout":30,"trace":{"traceparent":"00-ab-cd-01"},"later":"kept out"}'
    )
    assert JobMeta.parse(text) == JobMeta(
        task="send",
        context="bq1:k:sealed",
        batch="batch-1",
        flow_name="b",
        backoff=[1, 2],
        timeout=30.0,
        trace={"traceparent": "00-ab-cd-01"},
    )


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ('{"task": 3}', "task", None),
        ('{"batch": ["b"]}', "batch", None),
        ('{"flow_name": {}}', "flow_name", None),
        ('{"timeout": true}', "timeout", None),
        ('{"timeout": -1}', "timeout", None),
        ('{"timeout": 1e999}', "timeout", None),
        ('{"timeout": "30"}', "timeout", None),
        ('{"context": {"user": 1}}', "context", {"user": 1}),
        ('{"trace": "00-ab-cd-01"}', "trace", None),
        ('{"trace": {"traceparent": 1, "tracestate": "a=b"}}', "trace", {"tracestate": "a=b"}),
    ],
)
def test_a_value_no_core_could_have_written_reads_as_absent(
    text: str, field: str, value: Any
) -> None:
    assert getattr(JobMeta.parse(text), field) == value


@pytest.mark.anyio
async def test_a_worker_parses_a_jobs_meta_once_per_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str | None] = []
    real = JobMeta.parse.__func__  # type: ignore[attr-defined]

    def counting(cls: type[JobMeta], text: str | None) -> JobMeta:
        parsed.append(text)
        return real(cls, text)  # type: ignore[no-any-return]

    async with Queue(backends={"b": {"protocol": "memory"}}, sweep_interval=0) as queue:

        @queue.task(queue="q", name="greet", timeout=5, backoff=[1])
        async def greet(payload: Any, ctx: JobContext) -> None:
            assert ctx.job.context == {"user": "ada"}
            raise RuntimeError("again")

        await queue.job("greet", {}).with_context(user="ada").dispatch()
        monkeypatch.setattr(JobMeta, "parse", classmethod(counting))
        result = await queue.tick("q", queue.tasks)
    assert (result.leased, result.failed) == (1, 1)
    assert len(parsed) == 1


@pytest.mark.anyio
async def test_a_plain_job_without_meta_runs() -> None:
    seen: list[Job] = []

    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job)

    async with Queue(backends={"b": {"protocol": "memory"}}, sweep_interval=0) as queue:
        await queue.enqueue("q", 1)
        assert (await queue.tick("q", record)).succeeded == 1
    assert (seen[0].task, seen[0].context) == (None, {})
