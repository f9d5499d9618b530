"""SPEC §3.1 and §2: a job's life (pending → inflight → done), ids, enqueue_many, payloads."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from blamequeue import Job, JobContext, TickResult

from .fixtures import Conformance, fail, succeed
from .refusals import refused

__all__ = ["TestEnqueue", "TestLifecycle"]

_JOB_ID = re.compile(r"^job-[0-9A-HJKMNP-TV-Z]{26}$")


@pytest.mark.anyio
class TestEnqueue:
    async def test_enqueue_returns_job_prefixed_ulid(self, conformance: Conformance) -> None:
        job_id = await conformance.queue.enqueue(conformance.name, {"n": 1})
        assert _JOB_ID.match(job_id), job_id

    async def test_job_ids_are_unique_and_time_ordered(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        ids = [await q.enqueue(name, i) for i in range(20)]
        ids += await q.enqueue_many(name, list(range(20)))
        ids += [await q.enqueue(name, i) for i in range(5)]
        assert all(_JOB_ID.match(job_id) for job_id in ids)
        assert len(set(ids)) == len(ids)
        assert ids == sorted(ids)

    async def test_enqueue_stores_job_as_pending(self, conformance: Conformance) -> None:
        await conformance.queue.enqueue(conformance.name, "x")
        assert await conformance.size() == 1
        assert await conformance.leasable() == 1

    async def test_enqueue_many_returns_ids_in_payload_order(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        ids = await q.enqueue_many(name, ["a", "b", "c", "d"])
        seen: list[tuple[str, Any]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.payload))

        await q.tick(name, record, max=10)
        assert seen == list(zip(ids, ["a", "b", "c", "d"], strict=True))

    async def test_enqueue_many_of_nothing_returns_empty_list(
        self, conformance: Conformance
    ) -> None:
        assert await conformance.queue.enqueue_many(conformance.name, []) == []
        assert await conformance.size() == 0

    async def test_enqueue_many_stores_all_or_nothing(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "before")
        await refused(
            "queue/bad-payload", q.enqueue_many(name, ["ok", {"bad": object()}, "ok too"])
        )
        assert await conformance.size() == 1

    async def test_enqueue_many_applies_options_to_every_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(
            name, [1, 2], max_attempts=7, classification="internal", trace_id="trace-many"
        )
        jobs: list[Job] = []

        async def record(job: Job, ctx: JobContext) -> None:
            jobs.append(job)

        await q.tick(name, record)
        assert [(j.max_attempts, j.classification, j.trace_id) for j in jobs] == [
            (7, "internal", "trace-many")
        ] * 2

    async def test_payload_round_trips_as_json(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        payloads: list[Any] = [
            {"url": "https://example.com", "tags": ["a", "b"], "n": 3, "ratio": 0.25},
            ["ünïcødé ✓", "日本語", "emoji 🎉", 'quote " and \\ backslash'],
            None,
            True,
            -17,
            1.5,
            "",
            {"nested": {"deep": [1, [2, [3, {"k": None}]]]}},
            "x" * 100_000,
        ]
        for payload in payloads:
            await q.enqueue(name, payload)
        seen: list[Any] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.payload)

        await q.tick(name, record, max=len(payloads))
        assert seen == payloads

    async def test_queues_are_isolated(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        other = f"{name}-other"
        await q.enqueue(name, "mine")
        await q.enqueue(other, "theirs")
        assert await q.size(name) == 1
        assert await q.size(other) == 1
        seen: list[Any] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.queue, job.payload))

        await q.tick(other, record)
        assert seen == [(other, "theirs")]
        assert await q.size(name) == 1
        assert await q.size(other) == 0


@pytest.mark.anyio
class TestLifecycle:
    async def test_job_moves_pending_then_inflight_then_done(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "work")
        assert await conformance.size() == 1  # pending
        during: dict[str, Any] = {}

        async def handler(job: Job, ctx: JobContext) -> None:
            during["size"] = await q.size(name)  # inflight still counts
            during["leasable"] = (await q.tick(name, succeed)).leased  # but is not leasable

        result = await q.tick(name, handler)
        assert result.leased == 1
        assert result.succeeded == 1
        assert during == {"size": 1, "leasable": 0}
        assert await conformance.size() == 0  # done
        if conformance.capabilities.dlq:
            assert await conformance.dlq_size() == 0
        conformance.advance(3 * 3600)  # past any lease and retention
        await q.sweep()
        assert await conformance.leasable() == 0  # done is final
        assert await conformance.size() == 0

    async def test_handler_receives_job_as_enqueued(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        priority = 3 if conformance.capabilities.priority else 0
        enqueued_at = conformance.now()
        job_id = await q.enqueue(
            name,
            {"k": "v"},
            priority=priority,
            max_attempts=4,
            classification="confidential",
            trace_id="trace-123",
        )
        jobs: list[Job] = []

        async def record(job: Job, ctx: JobContext) -> None:
            jobs.append(job)

        await q.tick(name, record)
        [job] = jobs
        assert job.id == job_id
        assert job.queue == name
        assert job.payload == {"k": "v"}
        assert job.priority == priority
        assert job.attempts == 1
        assert job.max_attempts == 4
        assert job.classification == "confidential"
        assert job.trace_id == "trace-123"
        assert job.last_error is None
        assert job.created_at == datetime.fromtimestamp(enqueued_at, UTC)
        assert job.available_at == datetime.fromtimestamp(enqueued_at, UTC)
        assert job.created_at.tzinfo is not None

    async def test_context_carries_job_and_lease_deadline(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        seen: dict[str, Any] = {}

        async def record(job: Job, ctx: JobContext) -> None:
            seen["same_job"] = ctx.job == job
            seen["expires"] = ctx.lease_expires_at

        leased_at = conformance.now()
        await q.tick(name, record, lease=45)
        assert seen["same_job"] is True
        assert seen["expires"] == datetime.fromtimestamp(leased_at + 45, UTC)

    async def test_each_lease_counts_an_attempt(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("each retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "flaky", max_attempts=5)
        attempts: list[int] = []
        errors: list[str | None] = []

        async def flaky(job: Job, ctx: JobContext) -> None:
            attempts.append(job.attempts)
            errors.append(job.last_error)
            if job.attempts < 3:
                raise ValueError(f"attempt {job.attempts} failed")

        results: list[TickResult] = []
        for _ in range(3):
            results.append(await q.tick(name, flaky))
            conformance.advance(3600)  # past any backoff
        assert attempts == [1, 2, 3]
        assert errors[0] is None
        assert errors[1] is not None
        assert "attempt 1 failed" in errors[1]
        assert errors[2] is not None
        assert "attempt 2 failed" in errors[2]
        assert [(r.failed, r.succeeded) for r in results] == [(1, 0), (1, 0), (0, 1)]
        assert await conformance.size() == 0

    async def test_handler_failure_with_attempts_left_returns_job_to_pending(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x", max_attempts=2)
        result = await q.tick(name, fail)
        assert (result.failed, result.moved_to_dlq) == (1, 0)
        assert await conformance.size() == 1
        if conformance.capabilities.dlq:
            assert await conformance.dlq_size() == 0

    async def test_start_twice_is_a_noop(self, conformance: Conformance) -> None:
        await conformance.queue.enqueue(conformance.name, "x")
        await conformance.queue.start()
        assert await conformance.size() == 1

    async def test_shutdown_is_idempotent_and_a_noop_before_start(
        self, conformance: Conformance
    ) -> None:
        queue = conformance.factory.build()
        await queue.shutdown()  # before start: nothing to do
        await queue.start()
        await queue.shutdown()
        await queue.shutdown()
