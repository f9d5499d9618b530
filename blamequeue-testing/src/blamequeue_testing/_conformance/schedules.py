"""SPEC §9 / §11: the scheduler fires each slot of a cron schedule once, across every queue
object (process) sharing the backend; overlap policies; status; manual trigger; time zones
through DST.  Slots are claimed in the backend's shared records (``records``).

Time is the virtual clock's: a test moves it to just after a slot and asks every scheduler
to fire what is due (``run_due_schedules``), as their loops would.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from blamequeue import Every, JobContext, Queue, QueueError

from .fixtures import Conformance
from .refusals import refused, refused_at_once
from .requirements import lacking, requires, requires_virtual_time

__all__ = ["TestSchedules", "TestWithoutSchedules"]


def _declare(queue: Queue, name: str, cron: str = "* * * * *", **options: Any) -> None:
    @queue.task(name="Report", queue=name)
    async def report(payload: Any, ctx: JobContext) -> None:
        pass

    queue.schedule(cron, "Report", {"kind": "daily"}, name="reports", **options)


def _move_to(conformance: Conformance, when: datetime) -> None:
    conformance.clock.advance(when.timestamp() - conformance.now())


@requires("records", "the backend keeps no shared records for slot claims")
@requires_virtual_time("slots are read from the queue's clock")
class TestSchedules:
    async def test_each_slot_fires_once_across_schedulers(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name)
        async with conformance.factory.open() as other:  # another process, same store
            await conformance.require_shared_store(queue, other)
            _declare(other, name)
            assert await queue.run_due_schedules() == []  # a new schedule starts from now
            assert await other.run_due_schedules() == []
            fired: list[str] = []
            for _ in range(3):
                conformance.clock.advance(60)
                fired += await queue.run_due_schedules()
                fired += await other.run_due_schedules()
            assert len(fired) == 3
            assert await queue.size(name) == 3
            [status] = await other.schedules()
            assert status.last_job_id == fired[-1]
        async with conformance.factory.open() as viewer:  # declares nothing (e.g. the CLI)
            [seen] = await viewer.schedules()
            assert (seen.name, seen.expression, seen.task) == ("reports", "* * * * *", "Report")
            assert seen.last_job_id == fired[-1]
            assert status.last_outcome == "enqueued"
            assert status.last_job_state == "pending"

    async def test_a_missed_slot_fires_once_when_a_scheduler_returns(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name, Every.minutes(5))
        await queue.run_due_schedules()
        conformance.clock.advance(300)
        assert len(await queue.run_due_schedules()) == 1
        async with conformance.factory.open() as restarted:  # every scheduler was down...
            await conformance.require_shared_store(queue, restarted)
            _declare(restarted, name, Every.minutes(5))
            conformance.clock.advance(3 * 300)  # ...through three slots
            assert len(await restarted.run_due_schedules()) == 1  # only the latest fires
            assert await queue.size(name) == 2

    async def test_overlap_skip_and_replace(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name

        @queue.task(name="Sync", queue=name)
        async def sync(payload: Any, ctx: JobContext) -> None:
            pass

        queue.schedule("* * * * *", "Sync", name="skip", overlap="skip")
        queue.schedule("* * * * *", sync, name="replace", overlap="replace")
        await queue.run_due_schedules()
        conformance.clock.advance(60)
        first = await queue.run_due_schedules()
        assert len(first) == 2
        conformance.clock.advance(60)
        second = await queue.run_due_schedules()  # the first runs are still pending
        assert len(second) == 1  # "skip" enqueued nothing, "replace" replaced its run
        statuses = {s.name: s for s in await queue.schedules()}
        assert statuses["skip"].last_outcome == "skipped"
        assert statuses["replace"].last_job_id == second[0]
        states = {job_id: (await queue.job_info(job_id)).state for job_id in first}  # type: ignore[union-attr]
        assert sorted(states.values()) == ["cancelled", "pending"]

    async def test_trigger_runs_a_schedule_now(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name, "0 0 1 1 *")  # once a year
        job_id = await queue.trigger_schedule("reports")
        job = await queue.get_job(job_id)
        assert job is not None
        assert (job.task, job.payload) == ("Report", {"kind": "daily"})
        [status] = await queue.schedules()
        assert (status.last_outcome, status.last_job_id) == ("triggered", job_id)
        assert status.next_run.month == 1
        assert status.next_run.day == 1
        await refused("queue/bad-argument", queue.trigger_schedule("nope"))

    async def test_fixed_times_through_daylight_saving(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name, "30 2 * * *", tz="Europe/Berlin")
        # 2026-03-29: clocks jump from 02:00 to 03:00 in Berlin; 02:30 never happens.
        _move_to(conformance, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
        await queue.run_due_schedules()
        _move_to(conformance, datetime(2026, 3, 29, 1, 0, 1, tzinfo=UTC))  # 03:00:01 CEST
        [spring] = await queue.run_due_schedules()  # fired once, at the jump
        # 2026-10-25: 03:00 falls back to 02:00; 02:30 happens twice, fires once.
        _move_to(conformance, datetime(2026, 10, 24, 12, 0, tzinfo=UTC))
        await queue.run_due_schedules()
        _move_to(conformance, datetime(2026, 10, 25, 0, 30, 1, tzinfo=UTC))  # first 02:30
        assert len(await queue.run_due_schedules()) == 1
        _move_to(conformance, datetime(2026, 10, 25, 1, 30, 1, tzinfo=UTC))  # second 02:30
        assert await queue.run_due_schedules() == []
        assert spring

    async def test_a_slot_claimed_by_a_dead_scheduler_is_enqueued_once(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name, "0 * * * *")
        await queue.run_due_schedules()
        # A scheduler claimed the next slot and died before enqueueing its job.
        slot = (conformance.now() // 3600 + 1) * 3600
        claim = {"job_id": "job-claimedbutlost0000000000", "state": "claimed", "slot": slot}
        await queue.records().put("schedule-slot", f"reports@{slot:.0f}", {**claim, "at": slot})
        conformance.clock.advance(slot - conformance.now() + 1)
        assert await queue.run_due_schedules() == []  # claimed: not ours, not yet abandoned
        conformance.clock.advance(60)
        await queue.run_due_schedules()  # abandoned: enqueued under the claimed id
        await queue.run_due_schedules()
        assert await queue.size(name) == 1
        assert await queue.get_job("job-claimedbutlost0000000000") is not None

    async def test_bad_schedules_are_refused(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        _declare(queue, name)
        bad: list[tuple[str, dict[str, Any], str]] = [
            ("61 * * * *", {}, "queue/bad-argument"),
            ("* * * * *", {"overlap": "sometimes"}, "queue/bad-argument"),
            ("* * * * *", {"name": "reports"}, "queue/bad-argument"),  # taken
            ("* * * * *", {"tz": "Mars/Olympus"}, "queue/bad-argument"),
        ]
        for cron, options, code in bad:
            refused_at_once(
                code, partial(queue.schedule, cron, "Report", **options), case=(cron, options)
            )
        refused_at_once("queue/unknown-job", lambda: queue.schedule("* * * * *", "NoSuchTask"))
        helpers: list[Callable[[], str]] = [
            lambda: Every.minutes(7),
            lambda: Every.day_at("25:00"),
        ]
        for helper in helpers:
            with pytest.raises(QueueError):
                helper()


@lacking("records", "TestSchedules covers it")
class TestWithoutSchedules:
    async def test_schedules_need_records(self, conformance: Conformance) -> None:
        _declare(conformance.queue, conformance.name)
        await refused("queue/records-unsupported", conformance.queue.trigger_schedule("reports"))
