"""QueueFake: dispatches are recorded, asserted on, and handlers run directly."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from blamequeue import Job, Queue
from blamequeue.errors import BadArgumentError, QueueError
from blamequeue_testing import Dispatch, FakeJobContext, QueueFake, SyncFakeJobContext, VirtualClock

pytestmark = pytest.mark.anyio


# -- recording ------------------------------------------------------------------------------
async def test_enqueue_is_recorded_and_nothing_is_stored(
    bq_queue: Queue, bq_fake: QueueFake
) -> None:
    job_id = await bq_queue.enqueue("emails", {"to": "ada"}, delay=60, priority=2)
    assert job_id == "job-fake-1"
    assert bq_fake.dispatches == [
        Dispatch(
            queue_name="emails",
            payload={"to": "ada"},
            options={"delay": 60, "priority": 2},
            job_id="job-fake-1",
        )
    ]
    assert await bq_queue.size("emails") == 0


async def test_enqueue_many_records_one_dispatch_per_payload(
    bq_queue: Queue, bq_fake: QueueFake
) -> None:
    ids = await bq_queue.enqueue_many("emails", [{"n": 1}, {"n": 2}], delay=5)
    assert ids == ["job-fake-1", "job-fake-2"]
    assert [(d.payload, d.delay, d.job_id) for d in bq_fake.dispatches] == [
        ({"n": 1}, 5.0, "job-fake-1"),
        ({"n": 2}, 5.0, "job-fake-2"),
    ]


async def test_uninstall_gives_the_queue_its_own_methods_back(bq_queue: Queue) -> None:
    with QueueFake(bq_queue) as fake:
        assert fake.installed
        await bq_queue.enqueue("q", 1)
    assert not fake.installed
    job_id = await bq_queue.enqueue("q", 2)
    assert not job_id.startswith("job-fake-")
    assert await bq_queue.size("q") == 1
    assert [d.payload for d in fake.dispatches] == [1]  # kept for assertions


async def test_install_and_uninstall_are_idempotent(bq_queue: Queue) -> None:
    fake = QueueFake(bq_queue)
    assert fake.install() is fake.install()
    fake.uninstall()
    fake.uninstall()
    assert "enqueue" not in vars(bq_queue)


async def test_async_context_manager_installs_for_its_block(bq_queue: Queue) -> None:
    async with QueueFake(bq_queue) as fake:
        await bq_queue.enqueue("q", 1)
    fake.assert_dispatched_times("q", 1)
    assert await bq_queue.size("q") == 0


async def test_a_call_the_real_method_would_not_accept_is_a_type_error(
    bq_queue: Queue, bq_fake: QueueFake
) -> None:
    with pytest.raises(TypeError):
        await bq_queue.enqueue("q", 1, dealy=5)  # type: ignore[call-arg]
    bq_fake.assert_nothing_dispatched()


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"delay": -1}, "queue/bad-argument"),
        ({"priority": 1.5}, "queue/bad-argument"),
        ({"max_attempts": 0}, "queue/bad-argument"),
        ({"unique_key": ""}, "queue/bad-argument"),
        ({"unique_for": 60}, "queue/bad-argument"),
        ({"timeout": 0}, "queue/bad-argument"),
    ],
)
async def test_bad_arguments_are_refused_like_the_real_enqueue(
    bq_queue: Queue, bq_fake: QueueFake, options: dict[str, Any], code: str
) -> None:
    with pytest.raises(QueueError) as info:
        await bq_queue.enqueue("q", 1, **options)
    assert info.value.code == code
    bq_fake.assert_nothing_dispatched()


async def test_a_payload_that_is_not_json_is_refused(bq_queue: Queue, bq_fake: QueueFake) -> None:
    with pytest.raises(BadArgumentError) as info:
        await bq_queue.enqueue("q", {"when": object()})
    assert info.value.code == "queue/bad-payload"
    with pytest.raises(BadArgumentError):
        await bq_queue.enqueue_many("q", [1, {2, 3}])
    bq_fake.assert_nothing_dispatched()


async def test_enqueue_many_refuses_a_unique_key_like_the_real_call(
    bq_queue: Queue, bq_fake: QueueFake
) -> None:
    with pytest.raises(BadArgumentError) as info:
        await bq_queue.enqueue_many("q", [1, 2], unique_key="k")
    assert info.value.code == "queue/bad-argument"
    bq_fake.assert_nothing_dispatched()


async def test_enqueue_many_refuses_a_single_mapping(bq_queue: Queue, bq_fake: QueueFake) -> None:
    with pytest.raises(BadArgumentError):
        await bq_queue.enqueue_many("q", {"not": "a list"})
    bq_fake.assert_nothing_dispatched()


async def test_a_slotted_queue_class_is_faked_through_a_subclass() -> None:
    @attrs.define(eq=False)
    class SlottedQueue:
        stored: list[Any] = attrs.field(factory=list)

        async def enqueue(self, queue_name: str, payload: Any, *, delay: float = 0.0) -> str:
            self.stored.append(payload)
            return "real"

        async def enqueue_many(self, queue_name: str, payloads: list[Any]) -> list[str]:
            return ["real"]

    queue = SlottedQueue()
    with QueueFake(queue) as fake:  # type: ignore[arg-type]
        assert await queue.enqueue("q", 1, delay=2) == "job-fake-1"
        assert isinstance(queue, SlottedQueue)
    assert type(queue) is SlottedQueue
    assert await queue.enqueue("q", 2) == "real"
    assert queue.stored == [2]
    fake.assert_dispatched_with_delay("q", 2)


# -- asserting ------------------------------------------------------------------------------
@pytest.fixture
async def fake_with_dispatches(bq_queue: Queue, bq_fake: QueueFake) -> QueueFake:
    await bq_queue.enqueue("emails", {"to": "ada"}, delay=60)
    await bq_queue.enqueue("emails", {"to": "bob"})
    await bq_queue.enqueue("reports", {"month": 5}, backend="memory")
    return bq_fake


async def test_assert_dispatched_passes_and_returns_the_matches(
    fake_with_dispatches: QueueFake,
) -> None:
    fake = fake_with_dispatches
    assert len(fake.assert_dispatched("emails")) == 2
    [match] = fake.assert_dispatched("emails", lambda d: d.payload["to"] == "bob")
    assert match.job_id == "job-fake-2"
    fake.assert_dispatched("emails", {"to": "ada"})  # a value is compared with the payload
    fake.assert_dispatched("emails", times=2)


async def test_assert_dispatched_failure_lists_what_was_dispatched(
    fake_with_dispatches: QueueFake,
) -> None:
    with pytest.raises(AssertionError) as info:
        fake_with_dispatches.assert_dispatched("emails", {"to": "eve"})
    message = str(info.value)
    assert "expected a dispatch on queue 'emails' with payload {'to': 'eve'}, found none" in message
    assert "job-fake-1 on 'emails': {'to': 'ada'} (delay=60)" in message
    assert "job-fake-3 on 'reports'" in message


async def test_assert_dispatched_with_times_counts_exactly(
    fake_with_dispatches: QueueFake,
) -> None:
    with pytest.raises(AssertionError, match="expected 1 dispatch"):
        fake_with_dispatches.assert_dispatched("emails", times=1)


async def test_assert_dispatched_on_an_empty_fake_says_nothing_was_dispatched(
    bq_fake: QueueFake,
) -> None:
    with pytest.raises(AssertionError, match="nothing was dispatched"):
        bq_fake.assert_dispatched("emails")


async def test_assert_not_dispatched(fake_with_dispatches: QueueFake) -> None:
    fake = fake_with_dispatches
    fake.assert_not_dispatched("sms")
    fake.assert_not_dispatched("emails", {"to": "eve"})
    with pytest.raises(AssertionError, match="expected no dispatch on queue 'emails'"):
        fake.assert_not_dispatched("emails", lambda d: d.payload["to"] == "ada")


async def test_assert_dispatched_times(fake_with_dispatches: QueueFake) -> None:
    fake = fake_with_dispatches
    fake.assert_dispatched_times("emails", 2)
    fake.assert_dispatched_times("sms", 0)
    fake.assert_dispatched_times("emails", 1, {"to": "bob"})
    with pytest.raises(AssertionError, match="expected 3 dispatch"):
        fake.assert_dispatched_times("emails", 3)


async def test_assert_nothing_dispatched(bq_queue: Queue, bq_fake: QueueFake) -> None:
    bq_fake.assert_nothing_dispatched()
    await bq_queue.enqueue("q", 1)
    with pytest.raises(AssertionError, match="expected nothing dispatched, found 1"):
        bq_fake.assert_nothing_dispatched()
    bq_fake.clear()
    bq_fake.assert_nothing_dispatched()


async def test_assert_dispatched_with_delay(fake_with_dispatches: QueueFake) -> None:
    fake = fake_with_dispatches
    fake.assert_dispatched_with_delay("emails", 60)
    fake.assert_dispatched_with_delay("emails", 60.0, {"to": "ada"})
    fake.assert_dispatched_with_delay("emails", 0)  # bob passed no delay
    with pytest.raises(AssertionError, match=r"with delay 30\.0 s"):
        fake.assert_dispatched_with_delay("emails", 30)
    with pytest.raises(AssertionError):
        fake.assert_dispatched_with_delay("emails", 60, {"to": "bob"})


async def test_assert_dispatched_on(fake_with_dispatches: QueueFake) -> None:
    fake = fake_with_dispatches
    fake.assert_dispatched_on("reports")
    fake.assert_dispatched_on("reports", backend="memory")
    fake.assert_dispatched_on("emails", {"to": "bob"})
    with pytest.raises(AssertionError, match="on queue 'emails' on backend 'memory'"):
        fake.assert_dispatched_on("emails", backend="memory")
    with pytest.raises(AssertionError):
        fake.assert_dispatched_on("sms")


async def test_dispatched_filters_by_queue_and_predicate(fake_with_dispatches: QueueFake) -> None:
    fake = fake_with_dispatches
    assert len(fake.dispatched()) == 3
    assert [d.job_id for d in fake.dispatched("emails", lambda d: d.delay > 0)] == ["job-fake-1"]


# -- running handlers -----------------------------------------------------------------------
async def test_run_job_awaits_an_async_handler_with_a_job_and_a_context(
    bq_fake: QueueFake, bq_clock: VirtualClock
) -> None:
    seen: list[tuple[Job, Any]] = []

    async def handler(job: Job, ctx: Any) -> str:
        seen.append((job, ctx))
        await ctx.progress(50, {"step": 1})
        assert await ctx.extend_lease(60) is True
        return f"sent to {job.payload['to']}"

    result = await bq_fake.run_job(
        handler, {"to": "ada", "tags": ("a", "b")}, queue_name="emails", attempts=2
    )
    assert result == "sent to ada"
    [(job, ctx)] = seen
    assert isinstance(ctx, FakeJobContext)
    assert ctx is bq_fake.last_context
    assert job.queue == "emails"
    assert job.payload == {"to": "ada", "tags": ["a", "b"]}  # as it comes back from JSON
    assert (job.attempts, job.max_attempts, job.priority) == (2, 5, 0)
    assert job.id.startswith("job-fake-")
    assert job.created_at.timestamp() == bq_clock.now()
    assert job.created_at.tzinfo is not None
    assert ctx.progress_updates == [(50.0, {"step": 1})]
    assert ctx.extensions == [60.0]
    assert ctx.lease_expires_at.timestamp() == bq_clock.now() + 90
    assert ctx.lease_lost is False


async def test_run_job_calls_a_plain_handler_with_a_sync_context(bq_fake: QueueFake) -> None:
    def handler(job: Job, ctx: Any) -> int:
        ctx.progress(100)
        return int(job.payload) * 2

    assert await bq_fake.run_job(handler, 21) == 42
    assert isinstance(bq_fake.last_context, SyncFakeJobContext)
    assert bq_fake.last_context.progress_updates == [(100.0, None)]


async def test_run_job_hands_a_flow_child_the_dependency_results_it_is_given(
    bq_fake: QueueFake,
) -> None:
    async def report(job: Job, ctx: Any) -> int:
        results = await ctx.dependency_results()
        return int(results["fetch"]["rows"]) + 1

    def plain(job: Job, ctx: Any) -> dict[str, Any]:
        return dict(ctx.dependency_results())

    assert await bq_fake.run_job(report, None, dependency_results={"fetch": {"rows": 41}}) == 42
    assert await bq_fake.run_job(plain, None) == {}


async def test_the_context_records_log_lines_as_the_job_log_keeps_them(
    bq_fake: QueueFake,
) -> None:
    async def handler(job: Job, ctx: Any) -> None:
        await ctx.log("fetched 3 rows")
        await ctx.log("x" * 5000)

    def plain(job: Job, ctx: Any) -> None:
        ctx.log("plain")

    await bq_fake.run_job(handler, None)
    context = bq_fake.last_context
    assert context is not None
    assert context.logs[0] == "fetched 3 rows"
    assert context.logs[1] == "x" * 4096 + "...[truncated]"
    await bq_fake.run_job(plain, None)
    assert bq_fake.last_context is not None
    assert bq_fake.last_context.logs == ["plain"]


async def test_a_log_message_that_is_not_a_str_is_refused(bq_fake: QueueFake) -> None:
    async def handler(job: Job, ctx: Any) -> None:
        await ctx.log({"not": "text"})

    error = await bq_fake.expect_job_to_fail(handler, None, BadArgumentError)
    assert isinstance(error, BadArgumentError)
    assert error.code == "queue/bad-argument"


async def test_context_checks_its_arguments_like_the_real_one(bq_fake: QueueFake) -> None:
    async def handler(job: Job, ctx: Any) -> None:
        await ctx.progress(150)

    error = await bq_fake.expect_job_to_fail(handler, None, BadArgumentError)
    assert isinstance(error, BadArgumentError)
    assert error.code == "queue/bad-argument"


async def test_run_job_refuses_a_payload_that_is_not_json(bq_fake: QueueFake) -> None:
    async def handler(job: Job, ctx: Any) -> None:
        raise AssertionError("not reached")

    with pytest.raises(BadArgumentError) as info:
        await bq_fake.run_job(handler, object())
    assert info.value.code == "queue/bad-payload"


async def test_expect_job_to_fail_returns_the_exception(bq_fake: QueueFake) -> None:
    async def handler(job: Job, ctx: Any) -> None:
        raise ValueError(f"bad address {job.payload['to']!r}")

    error = await bq_fake.expect_job_to_fail(handler, {"to": ""}, ValueError)
    assert str(error) == "bad address ''"


async def test_expect_job_to_fail_fails_when_the_handler_succeeds(bq_fake: QueueFake) -> None:
    async def handler(job: Job, ctx: Any) -> str:
        return "fine"

    with pytest.raises(AssertionError, match="it returned 'fine'"):
        await bq_fake.expect_job_to_fail(handler, {})


async def test_expect_job_to_fail_fails_on_another_exception_type(bq_fake: QueueFake) -> None:
    def handler(job: Job, ctx: Any) -> None:
        raise KeyError("to")

    with pytest.raises(AssertionError, match="raise ValueError, it raised KeyError") as info:
        await bq_fake.expect_job_to_fail(handler, {}, ValueError)
    assert isinstance(info.value.__cause__, KeyError)
