"""SPEC §2 handlers: plain ``def`` handlers, odd exceptions and odd return values."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest

from blamequeue import Job, JobContext, QueueError, UnrecoverableError

from .cases import each
from .fixtures import Conformance, wait_until
from .running import Recorder, stop

__all__ = ["TestHandlers"]


class HandlerAbort(BaseException):
    """Not an ``Exception`` and not a cancellation: still just a failed attempt."""


async def _last_error_seen_by_the_retry(conformance: Conformance) -> str:
    """Move the clock past the default backoff after one failure (1 s) and run the retry of
    the test's one job; the ``last_error`` it carried."""
    conformance.advance(1)
    record = Recorder()
    await conformance.queue.tick(conformance.name, record)
    [job] = record.jobs
    assert job.last_error is not None
    return job.last_error


def _refuses_for_good(job: Job, ctx: Any) -> None:
    raise UnrecoverableError("order 42 was cancelled upstream")


async def _refuses_for_good_async(job: Job, ctx: JobContext) -> None:
    raise UnrecoverableError("order 42 was cancelled upstream")


def _raises_key_error(job: Job, ctx: Any) -> None:
    raise KeyError("missing row")


async def _raises_handler_abort(job: Job, ctx: JobContext) -> None:
    raise HandlerAbort("not an Exception")


_FAILING_HANDLERS: dict[str, tuple[Callable[[Job, Any], object], list[str]]] = {
    "sync-KeyError": (_raises_key_error, ["KeyError", "missing row"]),
    "async-BaseException": (_raises_handler_abort, ["HandlerAbort"]),
}
"""Per case, a handler that raises and what the error the retry carries must say."""


@pytest.mark.anyio
class TestHandlers:
    async def test_sync_handler_runs_with_a_plain_context(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, {"sync": True})
        seen: dict[str, Any] = {}

        def handler(job: Job, ctx: Any) -> None:
            seen["payload"] = job.payload
            seen["ctx_job"] = ctx.job.id
            seen["thread"] = threading.current_thread() is not threading.main_thread()
            extended = ctx.extend_lease(10)
            seen["extend"] = (inspect.isawaitable(extended), extended)
            progressed = ctx.progress(50)
            seen["progress"] = inspect.isawaitable(progressed)
            seen["expires"] = ctx.lease_expires_at

        result = await q.tick(name, handler)
        assert result.succeeded == 1
        assert seen["payload"] == {"sync": True}
        assert seen["ctx_job"] == job_id
        assert seen["thread"] is True  # a sync handler never blocks the event loop
        assert seen["extend"] == (False, True)
        assert seen["progress"] is False
        assert seen["expires"].tzinfo is not None

    @each("handler, error_says", _FAILING_HANDLERS)
    async def test_a_raising_handler_fails_the_attempt(
        self, conformance: Conformance, handler: Callable[[Job, Any], object], error_says: list[str]
    ) -> None:
        conformance.require_virtual_time("the retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x", max_attempts=2)
        result = await q.tick(name, handler)
        assert (result.leased, result.failed, result.succeeded) == (1, 1, 0)
        assert await conformance.size() == 1
        error = await _last_error_seen_by_the_retry(conformance)
        for text in error_says:
            assert text in error, (text, error)

    @each("handler", {"sync": _refuses_for_good, "async": _refuses_for_good_async})
    async def test_an_unrecoverable_error_dead_letters_the_job_at_once(
        self, conformance: Conformance, handler: Callable[[Job, Any], object]
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, {"order": 42}, max_attempts=5)
        result = await q.tick(name, handler)
        assert (result.leased, result.failed, result.moved_to_dlq) == (1, 1, 1)
        assert await conformance.size() == 0  # no retry waits, whatever attempts were left
        if conformance.capabilities.dlq:
            [letter] = await q.dlq_list(name)
            assert (letter.payload, letter.attempts) == ({"order": 42}, 1)
            assert letter.last_error is not None
            assert "UnrecoverableError: order 42 was cancelled upstream" in letter.last_error

    async def test_consumer_runs_sync_handlers(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2, 3])
        seen: list[int] = []
        lock = threading.Lock()

        def handler(job: Job, ctx: Any) -> None:
            with lock:
                seen.append(job.payload)

        consumer = await q.consume(name, handler, concurrency=2, poll_interval=0.05)
        stats = consumer.stats
        await wait_until(lambda: stats.succeeded + stats.failed >= 3, "three sync jobs to settle")
        await stop(consumer)
        assert (stats.succeeded, stats.failed) == (3, 0)
        assert sorted(seen) == [1, 2, 3]

    async def test_consumer_survives_a_handler_raising_base_exception(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["abort", "fine"])

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload == "abort":
                raise HandlerAbort("worker must live on")

        consumer = await q.consume(name, handler, poll_interval=0.05)
        await wait_until(
            lambda: consumer.stats.failed == 1 and consumer.stats.succeeded == 1,
            "both jobs to settle",
        )
        assert not consumer.cancelled
        await q.enqueue(name, "after")
        await wait_until(lambda: consumer.stats.succeeded == 2, "a later job to complete")
        await stop(consumer)

    async def test_return_value_that_is_not_json_still_completes_the_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")

        async def handler(job: Job, ctx: JobContext) -> object:
            return object()

        result = await q.tick(name, handler)
        assert (result.succeeded, result.failed) == (1, 0)
        assert await conformance.size() == 0

    async def test_handler_may_report_progress(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        codes: list[str] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            await ctx.progress(0)
            await ctx.progress(42.5, data={"step": "copy"})
            await ctx.progress(100)
            for bad in (-1, 101, "50", True):
                try:
                    await ctx.progress(bad)  # type: ignore[arg-type]
                except QueueError as exc:
                    codes.append(exc.code)

        result = await q.tick(name, handler)
        assert result.succeeded == 1
        assert codes == ["queue/bad-argument"] * 4
