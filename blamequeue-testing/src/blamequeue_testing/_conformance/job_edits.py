"""SPEC §15, job control: ``Queue.promote``, ``change_delay``, ``change_priority``,
``update_payload`` and ``rerun``.

The four edits act on a waiting job (pending, delayed, or parked where the spec says so) and
answer ``False`` for a job in any other state; ``rerun`` puts a done, dead or cancelled job back
to pending with its attempts reset.  A running job is never edited.  Backends whose
capabilities exclude ``job_edits`` refuse with ``queue/job-edits-unsupported``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from blamequeue import FlowChild, Job, JobContext, Queue

from .fixtures import BACKEND, Conformance, wait_for
from .flows import fetch_then_parse
from .on_time import _idle_until, _runs_at_due_time, _waits_until
from .refusals import refused
from .requirements import lacking, requires
from .running import Recorder, dead_job, done_job, lease_order, stop

__all__ = ["TestJobEdits", "TestWithoutJobEdits"]

Edit = Callable[[Queue, str], Awaitable[bool]]

#: Each edit of a waiting job, with arguments that would change it.
WAITING_EDITS: dict[str, Edit] = {
    "promote": lambda q, job_id: q.promote(job_id),
    "change_delay": lambda q, job_id: q.change_delay(job_id, 30),
    "change_priority": lambda q, job_id: q.change_priority(job_id, 7),
    "update_payload": lambda q, job_id: q.update_payload(job_id, {"edited": True}),
}
EDITS: dict[str, Edit] = {**WAITING_EDITS, "rerun": lambda q, job_id: q.rerun(job_id)}


async def _parked(conformance: Conformance) -> tuple[str, str]:
    """A :func:`fetch_then_parse` flow on the test's queue (skips without flows); the ids of
    ``fetch`` and of ``parse``, parked behind it."""
    conformance.require("flows", "parked flow children need flows")
    flow = await conformance.queue.enqueue_flow(conformance.name, fetch_then_parse())
    fetch, parse = (job.job_id for job in flow.jobs)
    return fetch, parse


async def _cancelled_job(conformance: Conformance, payload: Any = "cancelled") -> str:
    conformance.require("cancel", "a cancelled job needs cancel")
    job_id = await conformance.queue.enqueue(conformance.name, payload)
    assert await conformance.queue.cancel(job_id) is True
    return job_id


async def _answers_while_running(conformance: Conformance, edit: Edit) -> list[bool]:
    """What ``edit`` answers for a job called from that job's own handler (it is inflight)."""
    q = conformance.queue
    await q.enqueue(conformance.name, "running")
    answers: list[bool] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        answers.append(await edit(q, job.id))

    result = await q.tick(conformance.name, handler)
    assert (result.leased, result.succeeded) == (1, 1), result
    return answers


def _too_large(conformance: Conformance) -> str:
    """A payload one byte over the backend's ``max_payload_bytes`` once JSON-encoded."""
    limit = conformance.queue._runtimes[BACKEND].max_payload_bytes
    return "x" * (limit - 1)  # two quotes make it limit + 1 bytes


async def _state(conformance: Conformance, job_id: str) -> str | None:
    info = await conformance.queue.job_info(job_id)
    return None if info is None else info.state


@requires("job_edits", "the backend cannot edit or rerun a job by id")
class TestJobEdits:
    # -- promote -------------------------------------------------------------------------------
    async def test_promote_makes_a_delayed_job_due_now(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "later", delay=600)
        assert await lease_order(conformance) == []
        assert await q.promote(job_id) is True
        assert await lease_order(conformance) == ["later"]
        [event] = conformance.audit.named("system.job.promoted")
        assert (event.queue, event.job_id) == (name, job_id)

    async def test_a_promoted_job_starts_at_once_with_an_idle_consumer(
        self, conformance: Conformance
    ) -> None:
        conformance.require("next_due", "the idle consumer waits for the job's due time")
        conformance.require_virtual_time("the job must start before its old due time")
        consumer, starts = await _idle_until(conformance, "later", 600)
        job_id = (await conformance.queue.list_jobs(conformance.name)).jobs[0].job.id
        now = conformance.now()
        assert await conformance.queue.promote(job_id) is True
        await wait_for(starts.event, "the promoted job to start without the clock moving")
        await stop(consumer)
        assert starts.started == [("later", now)]

    async def test_promote_of_a_job_already_due_returns_false(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("the delayed job's time comes by moving the clock")
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "now")
        assert await q.promote(job_id) is False
        delayed = await q.enqueue(conformance.name, "soon", delay=5)
        conformance.advance(5)
        assert await q.promote(delayed) is False  # its time has come already
        assert conformance.audit.named("system.job.promoted") == []

    # -- change_delay ------------------------------------------------------------------------
    async def test_change_delay_counts_from_now(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("due times are reached by moving the clock")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x", delay=600)
        conformance.advance(100)
        assert await q.change_delay(job_id, 30) is True
        conformance.advance(29)
        assert await lease_order(conformance) == []
        conformance.advance(1)
        assert await lease_order(conformance) == ["x"]
        [event] = conformance.audit.named("system.job.delay.changed")
        assert (event.job_id, event.data["delay"]) == (job_id, 30)

    async def test_change_delay_puts_off_a_due_job(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("due times are reached by moving the clock")
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x")
        assert await q.change_delay(job_id, 60) is True
        assert await lease_order(conformance) == []
        conformance.advance(60)
        assert await lease_order(conformance) == ["x"]

    async def test_change_delay_to_zero_makes_the_job_due_now(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x", delay=600)
        assert await q.change_delay(job_id, 0) is True
        assert await lease_order(conformance) == ["x"]

    async def test_a_sooner_delay_starts_the_job_then_with_an_idle_consumer(
        self, conformance: Conformance
    ) -> None:
        conformance.require("next_due", "the idle consumer waits for the job's due time")
        conformance.require_virtual_time("due times are reached by moving the clock")
        consumer, starts = await _idle_until(conformance, "in ten minutes", 600)
        job_id = (await conformance.queue.list_jobs(conformance.name)).jobs[0].job.id
        due = conformance.now() + 30
        assert await conformance.queue.change_delay(job_id, 30) is True
        await _runs_at_due_time(conformance, consumer, starts, "in ten minutes", due)

    async def test_a_later_delay_holds_the_job_back_from_an_idle_consumer(
        self, conformance: Conformance
    ) -> None:
        conformance.require("next_due", "the idle consumer waits for the job's due time")
        conformance.require_virtual_time("due times are reached by moving the clock")
        consumer, starts = await _idle_until(conformance, "in a minute", 60)
        job_id = (await conformance.queue.list_jobs(conformance.name)).jobs[0].job.id
        due = conformance.now() + 600
        assert await conformance.queue.change_delay(job_id, 600) is True
        conformance.advance(60)  # the old due time: nothing starts
        await _waits_until(conformance, due)
        assert starts.started == []
        await _runs_at_due_time(conformance, consumer, starts, "in a minute", due)

    async def test_change_delay_of_a_parked_job_returns_false(
        self, conformance: Conformance
    ) -> None:
        _, parse = await _parked(conformance)
        assert await conformance.queue.change_delay(parse, 30) is False
        assert await _state(conformance, parse) == "parked"

    @pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "5", None, 10**12])
    async def test_change_delay_with_bad_seconds_is_refused_and_changes_nothing(
        self, conformance: Conformance, bad: Any
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x")
        await refused("queue/bad-argument", q.change_delay(job_id, bad), case=bad)
        assert await lease_order(conformance) == ["x"]

    # -- change_priority -----------------------------------------------------------------------
    async def test_change_priority_reorders_the_due_jobs(self, conformance: Conformance) -> None:
        conformance.require("priority", "leasing order must follow priorities")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "a")
        b = await q.enqueue(name, "b", priority=3)
        c = await q.enqueue(name, "c")
        assert await q.change_priority(c, 5) is True
        assert await q.change_priority(b, -1) is True
        assert await lease_order(conformance) == ["c", "a", "b"]
        events = conformance.audit.named("system.job.priority.changed")
        assert [(e.job_id, e.data["priority"]) for e in events] == [(c, 5), (b, -1)]

    async def test_change_priority_of_a_delayed_job_orders_it_once_due(
        self, conformance: Conformance
    ) -> None:
        conformance.require("priority", "leasing order must follow priorities")
        conformance.require_virtual_time("due times are reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "first")
        later = await q.enqueue(name, "later", delay=10)
        assert await q.change_priority(later, 9) is True
        conformance.advance(10)
        assert await lease_order(conformance) == ["later", "first"]

    async def test_change_priority_of_a_parked_job_applies_when_released(
        self, conformance: Conformance
    ) -> None:
        conformance.require("priority", "leasing order must follow priorities")
        _, parse = await _parked(conformance)
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "other")
        assert await q.change_priority(parse, 4) is True
        info = await q.job_info(parse)
        assert info is not None
        assert (info.state, info.job.priority) == ("parked", 4)
        order = [await lease_order(conformance, max=1) for _ in range(3)]
        assert order == [["fetch"], ["parse"], ["other"]]

    @pytest.mark.parametrize("bad", [1.5, True, "1", None, 2**31])
    async def test_change_priority_with_a_bad_priority_is_refused(
        self, conformance: Conformance, bad: Any
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x")
        await refused("queue/bad-argument", q.change_priority(job_id, bad), case=bad)
        info = await q.job_info(job_id)
        assert info is not None
        assert info.job.priority == 0

    # -- update_payload ------------------------------------------------------------------------
    async def test_the_handler_sees_the_updated_payload(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, {"version": 1}, delay=5)
        assert await q.update_payload(job_id, {"version": 2, "note": "é"}) is True
        job = await q.get_job(job_id)
        assert job is not None
        assert job.payload == {"version": 2, "note": "é"}
        conformance.advance(5)
        assert await lease_order(conformance) == [{"version": 2, "note": "é"}]
        [event] = conformance.audit.named("system.job.payload.updated")
        assert event.job_id == job_id
        assert "version" not in repr(event.data)

    async def test_a_parked_flow_child_runs_with_its_updated_payload(
        self, conformance: Conformance
    ) -> None:
        _, parse = await _parked(conformance)
        q = conformance.queue
        assert await q.update_payload(parse, ["parse", "edited"]) is True
        record = Recorder()
        await q.tick(conformance.name, record)  # fetch; parse is released
        await q.tick(conformance.name, record)
        assert record.seen == ["fetch", ["parse", "edited"]]

    @pytest.mark.parametrize("bad", [{1, 2}, object(), math.nan, {1: "a", "1": "b"}])
    async def test_update_payload_with_a_bad_payload_is_refused(
        self, conformance: Conformance, bad: Any
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "kept")
        await refused("queue/bad-payload", q.update_payload(job_id, bad), case=bad)
        assert await lease_order(conformance) == ["kept"]

    async def test_update_payload_with_a_payload_too_large_is_refused(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "kept")
        await refused("queue/payload-too-large", q.update_payload(job_id, _too_large(conformance)))
        assert await lease_order(conformance) == ["kept"]

    # -- rerun -----------------------------------------------------------------------------
    async def test_rerun_of_a_done_job_runs_it_again_from_its_first_attempt(
        self, conformance: Conformance
    ) -> None:
        conformance.require_retained_done_jobs()
        q, name = conformance.queue, conformance.name
        job_id = await done_job(q, name, "again")
        assert await q.rerun(job_id) is True
        assert await _state(conformance, job_id) == "pending"
        record = Recorder()
        await q.tick(name, record)
        assert [(j.id, j.payload, j.attempts) for j in record.jobs] == [(job_id, "again", 1)]
        [event] = conformance.audit.named("system.job.rerun")
        assert (event.job_id, event.data["from"]) == (job_id, "done")

    async def test_rerun_of_a_dead_job_is_a_dlq_retry(self, conformance: Conformance) -> None:
        conformance.require("dlq", "the job leaves the dead-letter queue")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name, "revived")
        assert await q.rerun(job_id) is True
        assert await conformance.dlq_size() == 0
        assert await conformance.size() == 1
        record = Recorder()
        await q.tick(name, record)
        assert [(j.payload, j.attempts) for j in record.jobs] == [("revived", 1)]
        [event] = conformance.audit.named("system.queue.dlq.retry")
        assert event.job_id == job_id
        assert conformance.audit.named("system.job.rerun") == []

    async def test_rerun_of_a_cancelled_job_runs_it(self, conformance: Conformance) -> None:
        q = conformance.queue
        job_id = await _cancelled_job(conformance, "uncancelled")
        assert await q.rerun(job_id) is True
        assert await conformance.size() == 1
        assert await lease_order(conformance) == ["uncancelled"]
        [event] = conformance.audit.named("system.job.rerun")
        assert event.data["from"] == "cancelled"

    async def test_a_rerun_job_starts_at_once_with_an_idle_consumer(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the rerun job comes from the dead-letter queue")
        conformance.require("next_due", "the idle consumer waits for a delayed job's due time")
        conformance.require_virtual_time("the job must start before the delayed one is due")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name, "revived")
        consumer, starts = await _idle_until(conformance, "in ten minutes", 600)
        now = conformance.now()
        assert await q.rerun(job_id) is True
        await wait_for(starts.event, "the rerun job to start without the clock moving")
        await stop(consumer)
        assert starts.started == [("revived", now)]

    async def test_a_rerun_flow_job_holds_its_parked_dependants_until_it_is_done_again(
        self, conformance: Conformance
    ) -> None:
        conformance.require("flows", "parked flow children need flows")
        conformance.require_retained_done_jobs()
        conformance.require_virtual_time("the rerun job comes due after the other dependency")
        q, name = conformance.queue, conformance.name
        children = [
            FlowChild(name="a", payload="a"),
            FlowChild(name="b", payload="b"),
            FlowChild(name="c", payload="c", depends_on=["a", "b"]),
        ]
        a, _, c = (job.job_id for job in (await q.enqueue_flow(name, children)).jobs)
        assert await lease_order(conformance, max=1) == ["a"]
        conformance.advance(1)
        assert await q.rerun(a) is True
        assert await lease_order(conformance, max=1) == ["b"]
        assert await _state(conformance, c) == "parked"  # "a" is not done (again) yet
        assert await lease_order(conformance, max=1) == ["a"]
        assert await lease_order(conformance) == ["c"]

    async def test_a_rerun_job_comes_back_without_its_unique_key(
        self, conformance: Conformance
    ) -> None:
        conformance.require("unique", "the job was enqueued with a unique key")
        conformance.require("cancel", "the finished job is a cancelled one")
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "first", unique_key="order-7")
        assert await q.cancel(first) is True
        assert await q.rerun(first) is True
        second = await q.enqueue(name, "second", unique_key="order-7")
        assert second != first
        assert await q.enqueue(name, "third", unique_key="order-7") == second
        assert sorted(await lease_order(conformance)) == ["first", "second"]

    async def test_rerun_of_a_pending_or_parked_job_returns_false(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x", delay=60)
        assert await q.rerun(job_id) is False
        if conformance.capabilities.flows:
            _, parse = await _parked(conformance)
            assert await q.rerun(parse) is False
        assert conformance.audit.named("system.job.rerun") == []

    async def test_a_second_rerun_before_the_job_runs_returns_false(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the job comes from the dead-letter queue")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name)
        assert await q.rerun(job_id) is True
        assert await q.rerun(job_id) is False
        assert await lease_order(conformance) == ["dead"]

    # -- every edit -------------------------------------------------------------------------
    @pytest.mark.parametrize("edit", sorted(EDITS))
    async def test_a_running_job_is_never_edited(self, conformance: Conformance, edit: str) -> None:
        assert await _answers_while_running(conformance, EDITS[edit]) == [False]

    @pytest.mark.parametrize("edit", sorted(WAITING_EDITS))
    async def test_edits_of_a_finished_job_return_false(
        self, conformance: Conformance, edit: str
    ) -> None:
        conformance.require("dlq", "the finished job is a dead one")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name)
        assert await WAITING_EDITS[edit](q, job_id) is False
        assert [d.job_id for d in await q.dlq_list(name)] == [job_id]
        if conformance.capabilities.keeps_done:
            done = await done_job(q, name)
            assert await WAITING_EDITS[edit](q, done) is False
            assert await _state(conformance, done) == "done"
        if conformance.capabilities.cancel:
            cancelled = await _cancelled_job(conformance)
            assert await WAITING_EDITS[edit](q, cancelled) is False
            assert await _state(conformance, cancelled) == "cancelled"

    async def test_promote_of_a_parked_job_returns_false(self, conformance: Conformance) -> None:
        _, parse = await _parked(conformance)
        assert await conformance.queue.promote(parse) is False
        assert await _state(conformance, parse) == "parked"

    @pytest.mark.parametrize("edit", sorted(EDITS))
    async def test_an_unknown_job_raises_job_not_found(
        self, conformance: Conformance, edit: str
    ) -> None:
        await refused("queue/job-not-found", EDITS[edit](conformance.queue, "job-does-not-exist"))

    @pytest.mark.parametrize("edit", sorted(EDITS))
    @pytest.mark.parametrize("bad", ["", None, 42])
    async def test_a_bad_job_id_is_refused(
        self, conformance: Conformance, edit: str, bad: Any
    ) -> None:
        await refused("queue/bad-argument", EDITS[edit](conformance.queue, bad), case=bad)


@lacking("job_edits", "TestJobEdits covers it")
class TestWithoutJobEdits:
    @pytest.mark.parametrize("edit", sorted(EDITS))
    async def test_each_edit_is_refused_with_job_edits_unsupported(
        self, conformance: Conformance, edit: str
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x", delay=60)
        await refused("queue/job-edits-unsupported", EDITS[edit](q, job_id))
        assert await conformance.size() == 1
