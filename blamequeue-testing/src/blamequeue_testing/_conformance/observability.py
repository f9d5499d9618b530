"""SPEC §9: metrics kept in the backend (every process reads the same figures), queue
statistics for health checks (delayed jobs, the oldest due job's wait) and ``Queue.health``.

Metrics need ``records``; queue statistics and health need ``inspection``.  Time is the
virtual clock's: a handler "runs" 1.5 s by advancing it.
"""

from __future__ import annotations

import pytest

from blamequeue import HealthThresholds, Job, JobContext, QueueError
from blamequeue.abc import Inspection

from .fixtures import Conformance
from .requirements import requires

__all__ = ["TestHealth", "TestMetrics", "TestQueueStats"]


@requires("inspection", "the backend cannot report queue statistics")
class TestQueueStats:
    async def test_delayed_jobs_and_the_oldest_due_job(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("due times are read from the queue's clock")
        queue, name = conformance.queue, conformance.name
        runtime = queue._runtime(None)
        stats = await Inspection.of(runtime.backend).queue_stats(name, now=conformance.now())
        assert (stats.delayed, stats.oldest_due_at) == (0, None)
        first_at = conformance.now()
        await queue.enqueue(name, "a", priority=1)
        conformance.clock.advance(5)
        await queue.enqueue(name, "b", priority=9)  # leased first, but waited less
        await queue.enqueue(name, "later", delay=1000)
        stats = await Inspection.of(runtime.backend).queue_stats(name, now=conformance.now())
        assert stats.delayed == 1
        assert stats.oldest_due_at == pytest.approx(first_at)
        conformance.clock.advance(1000)  # the delayed job is due now, and waited least
        stats = await Inspection.of(runtime.backend).queue_stats(name, now=conformance.now())
        assert stats.delayed == 0
        assert stats.oldest_due_at == pytest.approx(first_at)


@requires("records", "the backend keeps no shared records for metrics")
class TestMetrics:
    async def test_figures_are_kept_in_the_backend_for_every_process(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("durations are measured on the queue's clock")
        queue, name, clock = conformance.queue, conformance.name, conformance.clock

        async def handler(job: Job, ctx: JobContext) -> None:
            clock.advance(1.5)
            if job.payload == "bad":
                raise ValueError("card declined for order 7")

        await queue.enqueue(name, "ok")
        await queue.enqueue(name, "ok")
        await queue.enqueue(name, "bad", max_attempts=1)
        result = await queue.tick(name, handler, max=10)
        assert (result.succeeded, result.failed) == (2, 1)
        async with conformance.factory.open() as other:  # e.g. the CLI, in another process
            await conformance.require_shared_store(queue, other)
            metrics = await other.metrics(name, window=600)
        assert (metrics.succeeded, metrics.failed, metrics.dead) == (2, 1, 1)
        assert metrics.error_rate == pytest.approx(1 / 3)
        assert metrics.average_duration == pytest.approx(1.5)
        assert len(metrics.minutes) == 10
        assert sum(m.succeeded for m in metrics.minutes) == 2
        assert metrics.throughput_per_minute == pytest.approx(2 / 10)
        [error] = metrics.recent_errors
        assert error.dead
        assert error.attempts == 1
        assert "card declined" in error.error

    async def test_the_window_slides(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("the window is read from the queue's clock")
        queue, name = conformance.queue, conformance.name

        async def ok(job: Job, ctx: JobContext) -> None:
            pass

        await queue.enqueue(name, 1)
        await queue.tick(name, ok)
        conformance.clock.advance(3 * 60)
        await queue.enqueue(name, 2)
        await queue.tick(name, ok)
        assert (await queue.metrics(name, window=600)).succeeded == 2
        assert (await queue.metrics(name, window=60)).succeeded == 1

    async def test_recent_errors_are_bounded(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name

        async def fail(job: Job, ctx: JobContext) -> None:
            raise RuntimeError(f"boom {job.payload}")

        from blamequeue._metrics import ERRORS_KEPT

        total = ERRORS_KEPT + 15
        await queue.enqueue_many(name, list(range(total)), max_attempts=1)
        for _ in range(total // 10 + 1):
            await queue.tick(name, fail, max=10)
        metrics = await queue.metrics(name)
        assert metrics.failed == total
        assert len(metrics.recent_errors) == ERRORS_KEPT
        assert "boom" in metrics.recent_errors[0].error

    async def test_a_bad_window_is_refused(self, conformance: Conformance) -> None:
        for window in [0, 59, 24 * 3600 + 1, float("nan"), "1h"]:
            with pytest.raises(QueueError) as caught:
                await conformance.queue.metrics(conformance.name, window=window)  # type: ignore[arg-type]
            assert caught.value.code == "queue/bad-argument"


@requires("inspection", "the backend cannot list its queues")
class TestHealth:
    async def test_healthy_then_degraded_then_unhealthy_as_the_oldest_job_waits(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("waits are read from the queue's clock")
        queue, name = conformance.queue, conformance.name
        thresholds = HealthThresholds(max_oldest_age=100, max_error_rate=None)
        await queue.enqueue(name, "waiting")
        await queue.enqueue(name, "later", delay=10_000)
        report = await queue.health(thresholds)
        assert report.status == "healthy"
        assert report.http_status == 200
        [mine] = [q for q in report.queues if q.name == name]
        assert (mine.pending, mine.delayed, mine.inflight, mine.dead) == (1, 1, 0, 0)
        conformance.clock.advance(150)
        report = await queue.health(thresholds)
        assert (report.status, report.http_status) == ("degraded", 207)
        [alert] = [a for a in report.alerts if a.queue == name]
        assert (alert.level, alert.check) == ("warning", "oldest_job_age")
        conformance.clock.advance(100)
        report = await queue.health(thresholds)
        assert (report.status, report.http_status) == ("unhealthy", 503)
        [mine] = [q for q in report.queues if q.name == name]
        assert mine.oldest_job_age == pytest.approx(250)
        assert mine.status == "unhealthy"

    async def test_dead_jobs_and_missing_workers(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name

        async def fail(job: Job, ctx: JobContext) -> None:
            raise RuntimeError("nope")

        await queue.enqueue(name, "x", max_attempts=1)
        await queue.tick(name, fail)
        await queue.enqueue(name, "y")
        report = await queue.health(
            HealthThresholds(max_dead=0, min_workers=1, max_oldest_age=None, max_error_rate=None)
        )
        checks = {(a.check, a.level) for a in report.alerts if a.queue == name}
        assert checks == {("dead", "critical"), ("workers", "critical")}
        assert report.status == "unhealthy"
        assert report.to_dict()["status"] == "unhealthy"

    async def test_bad_thresholds_are_refused(self, conformance: Conformance) -> None:
        for bad in [
            {"max_pending": -1},
            {"max_error_rate": 1.5},
            {"min_workers": 0},
            {"critical_factor": 0.5},
            {"error_window": 1},
            {"max_oldest_age": float("nan")},
        ]:
            with pytest.raises(QueueError) as caught:
                HealthThresholds(**bad)  # type: ignore[arg-type]
            assert caught.value.code == "queue/bad-argument"
        with pytest.raises(QueueError) as caught:
            await conformance.queue.health({"max_pending": 1})  # type: ignore[arg-type]
        assert caught.value.code == "queue/bad-argument"
