"""The sqs backend against a real SQS endpoint (moto's server), through the Queue API and boto3.

What the conformance suite cannot check on SQS (its virtual clock cannot move SQS's timers) is
checked here with real durations of a second or two: retry delays, delays, the dead-letter
queue after retries, heartbeats and re-parking of long delays.  Waits are bounded by
``anyio.fail_after`` as a safety net, never asserted on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from asgi_server import serving
from blamequeue import Job, JobContext, Queue, QueueError, metrics_app
from blamequeue.abc import Backend, Settlement
from blamequeue_sqs import CountingClient
from blamequeue_sqs import _messages as sqs_messages
from blamequeue_testing import VirtualClock
from blamequeue_testing.conformance import AuditRecorder
from sqs.moto_server import REGION, SqsQueues, client

pytestmark = pytest.mark.anyio

SAFETY_NET = 15.0
SECRET = "card-4111-secret"


@asynccontextmanager
async def open_queue(config: dict[str, Any], **kwargs: Any) -> AsyncIterator[Queue]:
    queue = Queue(backends={"sqs": config}, sweep_interval=0, **kwargs)
    async with queue:
        yield queue


def backend_of(queue: Queue) -> Backend:
    return queue._runtimes["sqs"].backend


def peek(url: str, *, names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every visible message of ``url`` (received with visibility 0: it stays visible)."""
    response = client_for(url).receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageAttributeNames=["All"],
        AttributeNames=["All", *names],
    )
    return list(response.get("Messages", []))


def client_for(url: str) -> Any:
    return client(url.rsplit("/", 2)[0])


async def peek_async(url: str) -> list[dict[str, Any]]:
    return await anyio.to_thread.run_sync(peek, url)


async def noop(job: Job, ctx: JobContext) -> None:
    return None


async def boom(job: Job, ctx: JobContext) -> None:
    raise RuntimeError(f"declined {SECRET}")


async def until(predicate: Callable[[], bool], what: str) -> None:
    await eventually(lambda: _now(predicate), what, interval=0.02)


async def _now(predicate: Callable[[], bool]) -> bool:
    return predicate()


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, *, interval: float = 0.1
) -> None:
    """Poll SQS (it keeps its own timers: there is no event to wait for) until ``check()``."""
    try:
        with anyio.fail_after(SAFETY_NET):
            while True:
                if await check():
                    return
                await anyio.sleep(interval)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


# -- the model: messages, batches, tokens ---------------------------------------------------
async def test_job_is_one_message_with_its_id_attribute_and_a_sealed_body(
    sqs_queues: SqsQueues,
) -> None:
    async with open_queue(sqs_queues.config()) as q:
        job_id = await q.enqueue("emails", {"card": SECRET}, trace_id="t-1")
        [message] = await peek_async(sqs_queues.url)
    assert message["MessageAttributes"]["bq-job-id"]["StringValue"] == job_id
    body = json.loads(message["Body"])
    assert (body["id"], body["queue"], body["trace_id"]) == (job_id, "emails", "t-1")
    assert body["payload"].startswith("bq1:")
    assert SECRET not in message["Body"]


async def test_enqueue_many_sends_ten_jobs_per_request(sqs_queues: SqsQueues) -> None:
    counting = CountingClient(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=counting)
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        counting.reset()
        ids = await q.enqueue_many("emails", list(range(25)))
        assert counting.snapshot() == {"SendMessageBatch": 3}
        assert await q.size("emails") == 25
        assert len(set(ids)) == 25


async def test_lease_receives_ten_per_request_and_hands_out_in_enqueue_order(
    sqs_queues: SqsQueues,
) -> None:
    counting = CountingClient(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=counting)
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        ids = await q.enqueue_many("emails", list(range(25)))
        backend = backend_of(q)
        counting.reset()
        leases = await backend.lease("emails", limit=30, now=0.0, lease_seconds=30)
        assert counting.requests["ReceiveMessage"] == 3
        assert [lease.job.id for lease in leases] == ids
        # The receipt handle is the lease token; attempts are SQS's receive count.
        assert all(lease.job.attempts == 1 and lease.job.state == "inflight" for lease in leases)
        counting.reset()
        applied = await backend.settle(
            [Settlement(job_id=lz.job.id, token=lz.token, outcome="done", at=0.0) for lz in leases],
            now=0.0,
        )
        assert applied == [True] * 25
        assert counting.snapshot() == {"DeleteMessageBatch": 3}
        assert await q.size("emails") == 0


async def test_consume_batches_receives_and_deletes(sqs_queues: SqsQueues) -> None:
    counting = CountingClient(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=counting)
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        await q.enqueue_many("emails", list(range(100)))
        counting.reset()
        consumer = await q.consume("emails", noop, concurrency=20, poll_interval=0.05)
        await until(lambda: consumer.stats.succeeded == 100, "100 jobs")
        consumer.cancel()
        await consumer.wait_stopped()
    # Well under one request per job for receiving and deleting (the floor is 0.2).
    assert counting.requests["ReceiveMessage"] + counting.requests["DeleteMessageBatch"] < 60


async def test_settling_twice_or_with_a_foreign_token_is_stale(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "x")
        backend = backend_of(q)
        [lease] = await backend.lease("emails", limit=1, now=0.0, lease_seconds=30)
        done = Settlement(job_id=lease.job.id, token=lease.token, outcome="done", at=0.0)
        forged = Settlement(job_id=lease.job.id, token="forged", outcome="done", at=0.0)
        assert await backend.settle([done, done, forged], now=0.0) == [True, False, False]
        # The core retries a batch after a partial failure: the same answer, nothing redone.
        assert await backend.settle([done], now=0.0) == [True]


# -- retries, backoff and the dead-letter queue, in real seconds ---------------------------
async def test_failure_hides_the_message_for_the_backoff_delay(sqs_queues: SqsQueues) -> None:
    config = sqs_queues.config(backoff={"strategy": "fixed", "delay": 1})
    async with open_queue(config) as q:
        await q.enqueue("emails", "flaky", max_attempts=3)
        first = await q.tick("emails", boom)
        assert (first.failed, first.moved_to_dlq) == (1, 0)
        assert (await q.tick("emails", noop)).leased == 0  # hidden for the backoff
        assert await q.size("emails") == 1
        seen: list[int] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.attempts)

        async def retried() -> bool:
            await q.tick("emails", record)
            return bool(seen)

        await eventually(retried, "the retry after its backoff", interval=0.2)
        assert seen == [2]


async def test_exhausted_job_goes_to_the_redrive_dlq_with_its_sealed_error(
    sqs_queues: SqsQueues,
) -> None:
    audit = AuditRecorder()
    config = sqs_queues.config(backoff=[0])
    async with open_queue(config, audit_sinks=[audit]) as q:
        job_id = await q.enqueue("emails", {"card": SECRET}, max_attempts=2, trace_id="t-9")
        assert (await q.tick("emails", boom)).moved_to_dlq == 0
        results: list[Any] = []

        async def second_attempt() -> bool:  # SQS counts whole seconds: "0 s" may be a moment
            results.append(await q.tick("emails", boom))
            return bool(results[-1].leased)

        await eventually(second_attempt, "the second attempt")
        result = results[-1]
        assert (result.failed, result.moved_to_dlq) == (1, 1)
        assert await q.size("emails") == 0
        assert await q.dlq_size("emails") == 1
        [raw] = await peek_async(sqs_queues.dlq_url)
        assert raw["MessageAttributes"]["bq-job-id"]["StringValue"] == job_id
        sealed_error = raw["MessageAttributes"]["bq-last-error"]["StringValue"]
        assert sealed_error.startswith("bq1:")
        assert SECRET not in raw["Body"] + sealed_error
        [letter] = await q.dlq_list("emails")
        assert (letter.job_id, letter.payload, letter.attempts) == (job_id, {"card": SECRET}, 2)
        assert letter.trace_id == "t-9"
        assert letter.last_error is not None
        assert letter.last_error.startswith(f"RuntimeError: declined {SECRET}")
        assert [e.job_id for e in audit.named("system.queue.dlq.write")] == [job_id]


async def test_dlq_list_leaves_the_dead_letters_in_place(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        ids = [await q.enqueue("emails", n, max_attempts=1) for n in range(12)]
        result = await q.tick("emails", boom, max=12)
        assert result.moved_to_dlq == 12
        letters = await q.dlq_list("emails")
        assert sorted(letter.job_id for letter in letters) == sorted(ids)
        assert len(await q.dlq_list("emails", limit=5)) == 5
        assert await q.dlq_size("emails") == 12
        assert len(await q.dlq_list("emails")) == 12  # shown again after each scan


async def test_dlq_retry_sends_a_fresh_message_with_attempts_reset(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        keep = await q.enqueue("emails", "keep", max_attempts=1)
        again = await q.enqueue("emails", "again", max_attempts=1)
        await q.tick("emails", boom, max=2)
        assert await q.dlq_retry(again) is True
        assert await q.dlq_retry(again) is False
        assert [letter.job_id for letter in await q.dlq_list("emails")] == [keep]
        seen: list[tuple[str, int]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.attempts))

        assert (await q.tick("emails", record)).succeeded == 1
        assert seen == [(again, 1)]
        assert await q.dlq_purge("emails") == 1
        assert await q.dlq_size("emails") == 0


async def test_redrive_policy_is_the_backstop_for_messages_received_too_often(
    sqs_endpoint: str,
) -> None:
    from sqs.moto_server import make_queues

    queues = make_queues(sqs_endpoint, max_receive_count=1)
    async with open_queue(queues.config()) as q:
        job_id = await q.enqueue("emails", "poison")
        backend = backend_of(q)
        # A worker takes it and dies: SQS shows it again after the lease ...
        [lease] = await backend.lease("emails", limit=1, now=0.0, lease_seconds=1)

        # ... and the next receive finds it received maxReceiveCount times: SQS moves it to the
        # dead-letter queue itself.
        async def moved_by_sqs() -> bool:
            assert await backend.lease("emails", limit=1, now=0.0, lease_seconds=30) == []
            return await q.dlq_size("emails") == 1

        await eventually(moved_by_sqs, "SQS to redrive the message", interval=0.25)
        [letter] = await q.dlq_list("emails")
        assert (letter.job_id, letter.attempts, letter.last_error) == (job_id, 1, None)
        assert lease.token  # never settled


async def test_job_whose_worker_died_on_its_last_attempt_is_dead_lettered_by_the_lease(
    sqs_queues: SqsQueues,
) -> None:
    audit = AuditRecorder()
    async with open_queue(sqs_queues.config(), audit_sinks=[audit]) as q:
        job_id = await q.enqueue("emails", "kills its worker", max_attempts=1)
        backend = backend_of(q)
        await q.sweep()  # the sweep hands the backend its sealed "lease expired"
        assert len(await backend.lease("emails", limit=1, now=0.0, lease_seconds=1)) == 1

        async def dead_lettered() -> bool:
            result = await q.tick("emails", noop)
            assert result.leased == 0  # attempts exhausted: never handed out again
            return await q.dlq_size("emails") == 1

        await eventually(dead_lettered, "the lease to dead-letter the job", interval=0.25)
        await q.sweep()
        [letter] = await q.dlq_list("emails")
        assert (letter.job_id, letter.attempts, letter.last_error) == (
            job_id,
            1,
            "lease expired",
        )
        assert [e.job_id for e in audit.named("system.queue.dlq.write")] == [job_id]


# -- leases: heartbeat, extend, stale ---------------------------------------------------------
async def test_consume_heartbeat_keeps_a_slow_handler_message_hidden(
    sqs_queues: SqsQueues,
) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "slow")
        finish = anyio.Event()
        runs: list[int] = []

        async def slow(job: Job, ctx: JobContext) -> None:
            runs.append(job.attempts)
            await finish.wait()

        consumer = await q.consume("emails", slow, lease=1.5, poll_interval=0.05)
        await until(lambda: runs == [1], "the handler to start")
        await anyio.sleep(2.5)  # well past the 1.5 s lease: only the heartbeat keeps it
        assert (await q.tick("emails", noop)).leased == 0
        finish.set()
        await until(lambda: consumer.stats.succeeded == 1, "the slow job to finish")
        consumer.cancel()
        await consumer.wait_stopped()
        assert (consumer.stats.stale, runs) == (0, [1])
        assert await q.size("emails") == 0


async def test_extend_lease_keeps_a_tick_job(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "long")
        seen: dict[str, Any] = {}

        async def long(job: Job, ctx: JobContext) -> None:
            seen["extended"] = await ctx.extend_lease(5)
            await anyio.sleep(1.5)  # past the 1 s lease
            seen["other"] = (await q.tick("emails", noop)).leased

        result = await q.tick("emails", long, lease=1)
        assert seen == {"extended": True, "other": 0}
        assert (result.succeeded, result.stale) == (1, 0)


async def test_settling_a_purged_message_is_stale_and_extending_it_fails(
    sqs_queues: SqsQueues,
) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "x")
        seen: dict[str, Any] = {}

        async def purging(job: Job, ctx: JobContext) -> None:
            seen["purged"] = await q.purge("emails")
            seen["extended"] = await ctx.extend_lease(30)

        result = await q.tick("emails", purging)
        assert seen == {"purged": 1, "extended": False}
        assert (result.stale, result.succeeded) == (1, 0)


async def test_shutdown_release_gives_the_attempt_back(sqs_queues: SqsQueues) -> None:
    worker = Queue(backends={"sqs": sqs_queues.config()}, sweep_interval=0)
    await worker.start()
    started = anyio.Event()

    async def stuck(job: Job, ctx: JobContext) -> None:
        started.set()
        await anyio.sleep_forever()

    try:
        await worker.enqueue("emails", "interrupted", max_attempts=1)
        await worker.consume("emails", stuck, poll_interval=0.05)
        with anyio.fail_after(SAFETY_NET):
            await started.wait()
        await worker.shutdown(timeout=0)
    finally:
        await worker.shutdown()
    async with open_queue(sqs_queues.config()) as q:
        seen: list[int] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.attempts)

        assert (await q.tick("emails", record)).succeeded == 1
        assert seen == [1]


# -- delays ---------------------------------------------------------------------------------
async def test_delay_uses_delay_seconds(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "later", delay=1)
        assert await q.size("emails") == 1
        assert (await q.tick("emails", noop)).leased == 0

        async def leased() -> bool:
            return bool((await q.tick("emails", noop)).leased)

        await eventually(leased, "the delayed job to be due")


async def test_delay_beyond_sqs_limit_is_reparked_until_due(
    sqs_queues: SqsQueues, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQS delays 900 s at most; the test shrinks that limit to 1 s to see re-parking work.
    monkeypatch.setattr(sqs_messages, "MAX_DELAY_SECONDS", 1)
    async with open_queue(sqs_queues.config()) as q:
        clock = q.clock
        due = clock.now() + 3
        job_id = await q.enqueue("emails", "much later", delay=3)
        assert await q.size("emails") == 1
        seen: list[tuple[str, int, float]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.attempts, clock.now()))

        consumer = await q.consume("emails", record, poll_interval=0.1)
        await until(lambda: bool(seen), "the delayed job to run")
        consumer.cancel()
        await consumer.wait_stopped()
    [(ran, attempts, at)] = seen
    assert (ran, attempts) == (job_id, 1)  # the re-park receives are not attempts
    assert at >= due


# -- FIFO -------------------------------------------------------------------------------------
async def test_fifo_queue_keeps_order_with_group_and_deduplication_ids(
    sqs_queues: SqsQueues,
) -> None:
    config = sqs_queues.config(queue_url=sqs_queues.fifo_url)
    async with open_queue(config) as q:
        ids = await q.enqueue_many("orders", [f"step {n}" for n in range(15)])
        response = await anyio.to_thread.run_sync(
            lambda: client_for(sqs_queues.fifo_url).receive_message(
                QueueUrl=sqs_queues.fifo_url,
                MaxNumberOfMessages=1,
                VisibilityTimeout=0,
                AttributeNames=["MessageGroupId", "MessageDeduplicationId"],
            )
        )
        [first] = response["Messages"]
        assert first["Attributes"]["MessageGroupId"] == "orders"
        assert first["Attributes"]["MessageDeduplicationId"] == ids[0]
        seen: list[str] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.id)

        with anyio.fail_after(SAFETY_NET):
            while len(seen) < 15:
                await q.tick("orders", record, max=10)
        assert seen == ids


async def test_fifo_refuses_delay_and_priority_before_sending(sqs_queues: SqsQueues) -> None:
    config = sqs_queues.config(queue_url=sqs_queues.fifo_url)
    async with open_queue(config) as q:
        for kwargs in ({"delay": 5}, {"priority": 1}):
            with pytest.raises(QueueError) as info:
                await q.enqueue_many("orders", ["a", "b"], **kwargs)
            assert info.value.code == "queue/bad-argument"
        assert await q.size("orders") == 0


async def test_fifo_dead_letters_and_retries_them(sqs_queues: SqsQueues) -> None:
    config = sqs_queues.config(queue_url=sqs_queues.fifo_url)
    async with open_queue(config) as q:
        job_id = await q.enqueue("orders", "doomed", max_attempts=1)
        assert (await q.tick("orders", boom)).moved_to_dlq == 1
        assert [letter.job_id for letter in await q.dlq_list("orders")] == [job_id]
        assert await q.dlq_retry(job_id) is True  # a fresh deduplication id: not dropped
        assert (await q.tick("orders", noop)).succeeded == 1


async def test_fifo_message_group_per_job_runs_groups_in_parallel(sqs_queues: SqsQueues) -> None:
    config = sqs_queues.config(queue_url=sqs_queues.fifo_url, message_group="job")
    async with open_queue(config) as q:
        await q.enqueue_many("orders", list(range(12)))
        backend = backend_of(q)
        first = await backend.lease("orders", limit=10, now=0.0, lease_seconds=30)
        second = await backend.lease("orders", limit=10, now=0.0, lease_seconds=30)
        assert (len(first), len(second)) == (10, 2)


# -- what SQS cannot do ------------------------------------------------------------------------
async def test_priority_and_flows_are_refused(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        with pytest.raises(QueueError) as info:
            await q.enqueue("emails", "x", priority=5)
        assert info.value.code == "queue/bad-argument"
        with pytest.raises(QueueError) as info:
            await q.enqueue_flow("emails", [{"name": "a", "payload": 1}])
        assert info.value.code == "queue/flow-unsupported"
        assert await q.size("emails") == 0


async def test_payload_over_the_sqs_size_limit_is_refused_before_sending(
    sqs_queues: SqsQueues,
) -> None:
    async with open_queue(sqs_queues.config(seal=False)) as q:
        with pytest.raises(QueueError) as info:
            await q.enqueue_many("emails", ["small", "x" * 1_100_000])
        assert info.value.code == "queue/payload-too-large"  # max_payload_bytes: 184,320
        assert await q.size("emails") == 0


async def test_purge_returns_the_approximate_count(sqs_queues: SqsQueues) -> None:
    async with open_queue(sqs_queues.config()) as q:
        assert await q.purge("emails") == 0  # empty: no PurgeQueue spent
        await q.enqueue_many("emails", [1, 2, 3])
        await q.enqueue("emails", "later", delay=60)
        assert await q.purge("emails") == 4
        assert await q.size("emails") == 0


# -- setup, queues, clients, errors -----------------------------------------------------------
async def test_templated_queue_url_with_create_queues_makes_queue_and_dlq(
    sqs_endpoint: str,
) -> None:
    from sqs.moto_server import SEAL

    config = {
        "protocol": "sqs",
        "queue_url": f"{sqs_endpoint}/123456789012/tpl{uuid.uuid4().hex[:8]}-{{queue}}",
        "endpoint_url": sqs_endpoint,
        "region": REGION,
        "create_queues": True,
        "max_receive_count": 3,
        "seal": SEAL,
    }
    async with open_queue(config) as q:
        assert await q.size("never-used") == 0  # reading does not create
        await q.enqueue("made", "x")
        url = backend_of(q)._router.url_for("made")  # type: ignore[attr-defined]
        attributes = await anyio.to_thread.run_sync(
            lambda: client(sqs_endpoint).get_queue_attributes(
                QueueUrl=url, AttributeNames=["RedrivePolicy"]
            )
        )
        policy = json.loads(attributes["Attributes"]["RedrivePolicy"])
        assert policy["maxReceiveCount"] in (3, "3")
        assert policy["deadLetterTargetArn"].endswith(url.rsplit("/", 1)[1] + "-dlq")


async def test_missing_queue_fails_at_start_saying_what_to_do(sqs_endpoint: str) -> None:
    from sqs.moto_server import SEAL

    config = {
        "protocol": "sqs",
        "queue_url": f"{sqs_endpoint}/123456789012/no-such-queue",
        "endpoint_url": sqs_endpoint,
        "region": REGION,
        "seal": SEAL,
    }
    queue = Queue(backends={"sqs": config})
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.retryable is False
    assert "does not exist" in info.value.message


async def test_unreachable_endpoint_is_a_retryable_backend_error() -> None:
    config = {
        "protocol": "sqs",
        "queue_url": "http://127.0.0.1:9/123456789012/jobs",
        "endpoint_url": "http://127.0.0.1:9",
        "region": REGION,
        "seal": False,
        "retry": {"attempts": 1},
    }
    queue = Queue(backends={"sqs": config})
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert (info.value.code, info.value.retryable) == ("queue/backend-unavailable", True)


async def test_own_client_is_used_and_never_closed(sqs_queues: SqsQueues) -> None:
    own = client(sqs_queues.endpoint)
    closed: list[bool] = []
    real_close = own.close
    own.close = lambda: closed.append(True) or real_close()
    config = sqs_queues.config(client=own)
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        await q.enqueue("emails", "x")
    assert closed == []
    assert len(await peek_async(sqs_queues.url)) == 1


async def test_idle_consumer_long_polls_and_takes_work_from_another_process(
    sqs_queues: SqsQueues,
) -> None:
    counting = CountingClient(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=counting)
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        handled = anyio.Event()

        async def record(job: Job, ctx: JobContext) -> None:
            handled.set()

        consumer = await q.consume("emails", record, poll_interval=2)
        await anyio.sleep(0.3)  # idle: a long poll is waiting in SQS
        # "Another process": a message sent straight to SQS, no same-process wake-up.
        async with open_queue(sqs_queues.config()) as other:
            await other.enqueue("emails", "from elsewhere")
        with anyio.fail_after(SAFETY_NET):
            await handled.wait()
        consumer.cancel()
        await consumer.wait_stopped()
    assert counting.requests["ReceiveMessage"] <= 6


async def test_a_virtual_clock_far_ahead_of_sqs_does_not_break_leasing(
    sqs_queues: SqsQueues,
) -> None:
    clock = VirtualClock()
    async with open_queue(sqs_queues.config(), clock=clock) as q:
        await q.enqueue("emails", "x")
        clock.advance(10_000)
        assert (await q.tick("emails", noop)).succeeded == 1


class _RefusesOneOfTheFirstBatch:
    """A boto3 client whose first SendMessageBatch stores all but the last entry (as SQS does
    when one entry fails on its side)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def send_message_batch(self, **params: Any) -> dict[str, Any]:
        self.batches += 1
        if self.batches > 1:
            return dict(self._client.send_message_batch(**params))
        entries = params["Entries"]
        response = dict(self._client.send_message_batch(**{**params, "Entries": entries[:-1]}))
        response["Failed"] = [
            {"Id": entries[-1]["Id"], "SenderFault": False, "Code": "InternalError", "Message": "x"}
        ]
        return response


async def test_partly_refused_batch_says_so_and_a_retry_sends_only_the_rest(
    sqs_queues: SqsQueues,
) -> None:
    flaky = _RefusesOneOfTheFirstBatch(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=flaky, retry={"attempts": 2, "base": 0.01})
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        ids = await q.enqueue_many("emails", list(range(5)))  # the core retried once
        assert flaky.batches == 2
        stored = [
            m["MessageAttributes"]["bq-job-id"]["StringValue"]
            for m in await peek_async(sqs_queues.url)
        ]
        assert sorted(stored) == sorted(ids)  # each job once


async def test_partly_refused_batch_names_what_was_stored(sqs_queues: SqsQueues) -> None:
    flaky = _RefusesOneOfTheFirstBatch(client(sqs_queues.endpoint))
    config = sqs_queues.config(client=flaky, retry={"attempts": 1})
    del config["region"], config["endpoint_url"]
    async with open_queue(config) as q:
        with pytest.raises(QueueError) as info:
            await q.enqueue_many("emails", list(range(5)))
        assert (info.value.code, info.value.retryable) == ("queue/backend-unavailable", True)
        assert "refused 1 of 5 job(s)" in info.value.message
        assert "the others were stored" in info.value.message
        assert await q.size("emails") == 4


# -- someone who can send messages (SPEC §6 "A seal is bound to its place") ---------------
async def test_a_payload_copied_into_a_forged_message_is_dead_lettered_as_tampered(
    sqs_queues: SqsQueues,
) -> None:
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", {"card": SECRET})
        [message] = await peek_async(sqs_queues.url)
        forged = json.loads(message["Body"])
        forged["id"] = "job-forged-0001"  # the sealed payload of another job, under a new id
        await anyio.to_thread.run_sync(
            lambda: client_for(sqs_queues.url).send_message(
                QueueUrl=sqs_queues.url,
                MessageBody=json.dumps(forged),
                MessageAttributes={
                    "bq-job-id": {"DataType": "String", "StringValue": forged["id"]}
                },
            )
        )
        seen: list[Any] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.id)

        result = await q.tick("emails", record)
        assert (result.succeeded, result.moved_to_dlq) == (1, 1)
        assert "job-forged-0001" not in seen
        [dead] = await q.dlq_list("emails")
        assert dead.job_id == "job-forged-0001"
        assert dead.last_error is not None
        assert "tampered" in dead.last_error
        assert SECRET not in dead.last_error


# -- the Prometheus endpoint ----------------------------------------------------------------
async def test_prometheus_reports_this_processs_totals_only(
    sqs_queues: SqsQueues, anyio_backend: str
) -> None:
    """SQS keeps no shared records and cannot list its queues: the endpoint says the backend
    answered and counts what this process settled, and nothing else."""
    async with open_queue(sqs_queues.config()) as q:
        await q.enqueue("emails", "x")
        await q.tick("emails", noop)
        async with serving(metrics_app(q), anyio_backend) as url, httpx.AsyncClient() as http:
            answer = await http.get(f"{url}/metrics")
    assert answer.status_code == 200
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }
    emails = (("backend", "sqs"), ("queue", "emails"))
    assert found[("blamequeue_backend_up", (("backend", "sqs"),))] == 1
    assert found[("blamequeue_jobs_processed_total", emails)] == 1
    assert found[("blamequeue_job_duration_seconds_count", emails)] == 1
    assert not any(name.startswith("blamequeue_queue_") for name, _ in found)
