"""SPEC §15 job logs and SPEC §10 the last progress kept on the job: ``ctx.log(message)`` and
``Queue.job_logs``, ``ctx.progress`` and ``JobInfo.progress``.

Both live in the shared records, so they run on backends that declare ``records`` (and
``inspection``, to find the job); what is at rest is read through the backend's own
``Records`` methods, which hand back the stored bytes.  On a backend without records,
:class:`TestWithoutJobLogs` checks that ``job_logs`` is refused and that ``ctx.log`` does not
fail the handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC

import anyio
import pytest

from blamequeue import Job, JobContext, JobLogLine, JobProgress, Queue
from blamequeue._clock import to_datetime
from blamequeue._job_logs import LOG_LINE_KIND, PROGRESS_KIND
from blamequeue.abc import Records

from .fixtures import BACKEND, Conformance, succeed, wait_for
from .refusals import refused
from .requirements import lacking, requires

__all__ = ["TestJobLogs", "TestLastProgress", "TestWithoutJobLogs"]

RETAIN = 3600.0
"""``retain_done`` of the tests that read a done job (whatever bq_backend_config sets)."""
SECRET = "log-secret-7f3a"


def _logging(*messages: str) -> Callable[[Job, JobContext], Awaitable[None]]:
    async def handler(job: Job, ctx: JobContext) -> None:
        for message in messages:
            await ctx.log(message)

    return handler


async def _raw(queue: Queue, kind: str, job_id: str) -> list[bytes]:
    """The stored bytes of the records of ``kind`` kept for ``job_id``."""
    backend = Records.of(queue._runtimes[BACKEND].backend)
    now = queue._runtimes[BACKEND].clock.now()
    records = await backend.record_list(kind, now=now, prefix=f"{job_id}/")
    return [record.value or b"" for record in records]


def _require_sealing(queue: Queue) -> None:
    if not queue._runtimes[BACKEND].codec.sealed:
        pytest.skip("bq_backend_config turns sealing off")


@requires("inspection", "job_logs finds the job through inspection")
@requires("records", "job logs are kept in the shared records")
class TestJobLogs:
    async def test_lines_come_back_in_order_with_time_and_attempt(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        await q.tick(name, _logging("fetching", "fetched 3 rows"))
        lines = await q.job_logs(job_id)
        assert [(line.attempt, line.message) for line in lines] == [
            (1, "fetching"),
            (1, "fetched 3 rows"),
        ]
        assert all(isinstance(line, JobLogLine) for line in lines)
        assert all(line.time.tzinfo is UTC for line in lines)
        assert lines[0].time == to_datetime(conformance.now())

    async def test_each_line_names_the_attempt_that_wrote_it_across_a_retry(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("the retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None, max_attempts=2)

        async def flaky(job: Job, ctx: JobContext) -> None:
            await ctx.log(f"try {job.attempts}")
            if job.attempts == 1:
                raise ValueError("first attempt fails")
            await ctx.log("done")

        await q.tick(name, flaky)
        first = conformance.now()
        conformance.advance(3600)  # past any backoff
        await q.tick(name, flaky)
        lines = await q.job_logs(job_id)
        assert [(line.attempt, line.message) for line in lines] == [
            (1, "try 1"),
            (2, "try 2"),
            (2, "done"),
        ]
        assert lines[0].time == to_datetime(first)
        assert lines[1].time == to_datetime(conformance.now())

    async def test_a_job_that_wrote_nothing_has_an_empty_log(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        assert await q.job_logs(job_id) == []
        await q.tick(name, succeed)
        assert await q.job_logs(job_id) == []

    async def test_the_log_of_an_unknown_job_is_job_not_found(
        self, conformance: Conformance
    ) -> None:
        await refused("queue/job-not-found", conformance.queue.job_logs("job-does-not-exist"))

    async def test_lines_logged_from_several_tasks_at_once_are_all_kept(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)

        async def fan_out(job: Job, ctx: JobContext) -> None:
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(ctx.log, f"task {i}")

        await q.tick(name, fan_out)
        messages = [line.message for line in await q.job_logs(job_id)]
        assert sorted(messages) == sorted(f"task {i}" for i in range(20))

    async def test_only_the_last_1000_lines_are_kept(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        await q.tick(name, _logging(*(f"line {i}" for i in range(1005))))
        lines = await q.job_logs(job_id)
        assert len(lines) == 1000
        assert [lines[0].message, lines[-1].message] == ["line 5", "line 1004"]
        assert len(await _raw(q, LOG_LINE_KIND, job_id)) == 1000  # the older ones deleted

    async def test_a_message_over_4096_characters_is_cut_and_marked(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        await q.tick(name, _logging("é" * 5000))
        [line] = await q.job_logs(job_id)
        assert line.message == "é" * 4096 + "...[truncated]"

    async def test_a_message_that_is_not_a_str_is_refused_in_the_handler(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        codes: list[str] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            try:
                await ctx.log(42)  # type: ignore[arg-type]
            except Exception as exc:
                codes.append(getattr(exc, "code", repr(exc)))

        await q.tick(name, handler)
        assert codes == ["queue/bad-argument"]
        assert await q.job_logs(job_id) == []

    async def test_a_plain_handler_logs_with_a_plain_call(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)

        def plain(job: Job, ctx: object) -> None:
            ctx.log("from a thread")  # type: ignore[attr-defined]

        await q.tick(name, plain)
        assert [line.message for line in await q.job_logs(job_id)] == ["from a thread"]

    async def test_lines_are_sealed_at_rest(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        _require_sealing(q)
        job_id = await q.enqueue(name, None)
        await q.tick(name, _logging(f"card {SECRET}"))
        [stored] = await _raw(q, LOG_LINE_KIND, job_id)
        assert SECRET.encode() not in stored
        assert [line.message for line in await q.job_logs(job_id)] == [f"card {SECRET}"]

    async def test_another_queue_on_the_same_store_reads_them(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        await q.tick(name, _logging("one", "two"))
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(q, other)
            assert await other.job_logs(job_id) == await q.job_logs(job_id)

    async def test_the_log_goes_with_the_pruned_job(self, conformance: Conformance) -> None:
        conformance.require_retained_done_jobs()
        async with conformance.factory.open(retain_done=5) as q:
            job_id = await q.enqueue(conformance.name, None)
            await q.tick(conformance.name, _logging("kept while the job is"))
            assert len(await q.job_logs(job_id)) == 1
            conformance.advance(5.001)
            await q.sweep()
            info = await refused("queue/job-not-found", q.job_logs(job_id))
            assert "retain_done" in info.message


@requires("inspection", "JobInfo.progress is read through inspection")
@requires("records", "the last progress is kept in the shared records")
class TestLastProgress:
    async def test_job_info_keeps_the_last_progress_after_the_job_finished(
        self, conformance: Conformance
    ) -> None:
        conformance.require_retained_done_jobs()
        async with conformance.factory.open(retain_done=RETAIN) as q:
            job_id = await q.enqueue(conformance.name, None)

            async def steps(job: Job, ctx: JobContext) -> None:
                await ctx.progress(25, {"step": "fetch"})
                await ctx.progress(75, {"step": "write"})

            await q.tick(conformance.name, steps)
            info = await q.job_info(job_id)
            assert info is not None
            assert info.state == "done"
            assert info.progress == JobProgress(
                percent=75.0, data={"step": "write"}, time=to_datetime(conformance.now())
            )
            [listed] = (await q.list_jobs(conformance.name)).jobs
            assert listed.progress == info.progress

    async def test_a_late_reader_on_another_queue_sees_where_a_running_job_stands(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        reported = anyio.Event()
        release = anyio.Event()

        async def slow(job: Job, ctx: JobContext) -> None:
            await ctx.progress(40, "halfway there")
            reported.set()
            await release.wait()

        async with conformance.factory.open() as other:
            await conformance.require_shared_store(q, other)
            async with anyio.create_task_group() as tg:
                tg.start_soon(q.tick, name, slow)
                await wait_for(reported, "the handler to report progress")
                info = await other.job_info(job_id)
                release.set()
            assert info is not None
            assert info.state == "inflight"
            assert info.progress is not None
            assert (info.progress.percent, info.progress.data) == (40.0, "halfway there")

    async def test_reports_within_a_second_are_kept_when_the_handler_ends(
        self, conformance: Conformance
    ) -> None:
        conformance.require_retained_done_jobs()
        async with conformance.factory.open(retain_done=RETAIN) as q:
            name = conformance.name
            job_id = await q.enqueue(name, None)
            reported = anyio.Event()
            release = anyio.Event()
            seen: list[float | None] = []

            async def chatty(job: Job, ctx: JobContext) -> None:
                for percent in (10, 20, 30):
                    await ctx.progress(percent)
                reported.set()
                await release.wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(q.tick, name, chatty)
                await wait_for(reported, "the handler to report progress")
                running = await q.job_info(job_id)
                seen.append(
                    None if running is None or not running.progress else running.progress.percent
                )
                release.set()
            done = await q.job_info(job_id)
            assert done is not None
            assert done.progress is not None
            assert seen == [10.0]  # the first is stored at once, the rest once a second
            assert done.progress.percent == 30.0

    async def test_a_job_that_never_reported_has_no_progress(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        info = await q.job_info(job_id)
        assert info is not None
        assert info.progress is None

    async def test_the_last_progress_is_sealed_at_rest(self, conformance: Conformance) -> None:
        conformance.require_retained_done_jobs()
        async with conformance.factory.open(retain_done=RETAIN) as q:
            _require_sealing(q)
            job_id = await q.enqueue(conformance.name, None)

            async def private(job: Job, ctx: JobContext) -> None:
                await ctx.progress(50, {"card": SECRET})

            await q.tick(conformance.name, private)
            [stored] = await _raw(q, PROGRESS_KIND, job_id)
            assert SECRET.encode() not in stored
            info = await q.job_info(job_id)
            assert info is not None
            assert info.progress is not None
            assert info.progress.data == {"card": SECRET}


@lacking("records", "TestJobLogs covers a backend that keeps them")
class TestWithoutJobLogs:
    async def test_job_logs_is_refused_with_a_clear_code(self, conformance: Conformance) -> None:
        caught = await refused("queue/records-unsupported", conformance.queue.job_logs("job-x"))
        assert "records" in str(caught)

    async def test_ctx_log_does_not_fail_the_handler(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, None)
        result = await q.tick(name, _logging("dropped: nowhere to keep it"))
        assert (result.succeeded, result.failed) == (1, 0)
