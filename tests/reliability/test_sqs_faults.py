"""SQS faults: throttling, 5xx answers, dropped connections and lost answers, injected at the
HTTP layer between boto3 and moto's SQS server by :class:`sqs_fault_proxy.FaultProxy`.

What must hold (SPEC §3.10, §14): every fault reaches a caller as a retryable
``queue/backend-unavailable`` naming the SQS action and the fault, after the backend's ``retry``
policy (botocore's own retries are off, so one try is one request); a sustained outage opens
the breaker (audit ``system.queue.breaker.open``) and it closes after (``.close``); producers
and consumers on both event loops ride everything out, no consumer dies, and every acknowledged
enqueue is completed.  Duplicates are possible (an answer lost after SQS applied the request)
and each one is counted and accounted for; loss is not.

Real time, not a ``VirtualClock``: SQS keeps visibility timeouts on its own clock, so the
backend's view of a lease must move with it.  The breaker's ``reset_timeout`` is a second or
so; waits are bounded by ``HANG_GUARD``, never asserted on.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from reliability_report import Form, Reports, ScenarioReport, Tally
from sqs_fault_proxy import (
    DROP,
    FAULTS,
    INTERNAL_FAILURE,
    LOSE_ANSWER,
    REQUEST_THROTTLED,
    SERVICE_UNAVAILABLE,
    THROTTLING,
    FaultProxy,
)

from blamequeue import AuditEvent, Job, JobContext, Queue
from blamequeue.errors import QueueError
from blamequeue_sqs._transport import botocore_tries
from blamequeue_testing.servers import sqs_dev_server
from sqs.moto_server import REGION, SqsQueues, client, make_queues, sqs_endpoint  # noqa: F401

pytestmark = pytest.mark.anyio

QUEUE = "faults"
#: How long a test waits for something it expects before it fails: a hang guard, not a timing.
HANG_GUARD = 120.0
FAST_RETRY = {"attempts": 3, "base": 0.01, "cap": 0.05}
#: A breaker that stays closed: for tests that look at single calls.
NO_BREAKER = {"failure_threshold": 1_000_000}


@pytest.fixture
def proxy(sqs_endpoint: str) -> Iterator[FaultProxy]:  # noqa: F811
    with FaultProxy(sqs_endpoint) as proxy:
        yield proxy


@pytest.fixture
def queues(sqs_endpoint: str) -> SqsQueues:  # noqa: F811
    return make_queues(sqs_endpoint)


def through(proxy: FaultProxy, queues: SqsQueues, url: str | None = None, **options: Any) -> Any:
    """A backend config whose every request goes through ``proxy``."""
    config = queues.config(endpoint_url=proxy.endpoint, **options)
    if url is not None:
        config["queue_url"] = url
    return config


def stored(url: str) -> int:
    """Messages SQS holds for ``url`` (visible, in flight or delayed), asked of moto directly."""
    attributes = client(url.rsplit("/", 2)[0]).get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


async def emptied(url: str, guard: float = HANG_GUARD) -> None:
    """Wait until SQS holds nothing for ``url`` (copies and unsettled jobs come back late)."""
    with anyio.fail_after(guard):
        while True:
            if not await anyio.to_thread.run_sync(stored, url):
                return
            await anyio.sleep(0.2)


class Ledger:
    """What the handlers did: successful runs per job id and per payload key."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.by_id: collections.Counter[str] = collections.Counter()
        self.by_key: collections.Counter[str] = collections.Counter()
        self.failed_on_purpose = 0
        self.fail_first = fail_first
        self.changed = anyio.Event()

    async def handler(self, job: Job, ctx: JobContext) -> None:
        if self.fail_first and job.payload.get("fail_first") and job.attempts == 1:
            self.failed_on_purpose += 1
            raise RuntimeError("fails its first attempt on purpose")
        self.by_id[job.id] += 1
        self.by_key[str(job.payload["key"])] += 1
        self.changed.set()
        self.changed = anyio.Event()

    def twice(self) -> int:
        return sum(1 for count in self.by_id.values() if count > 1)

    async def until(self, done: Any, what: str, guard: float = HANG_GUARD) -> None:
        with anyio.fail_after(guard):
            while not done():
                with anyio.move_on_after(0.2):
                    await self.changed.wait()
        assert done(), what


async def drain(queue: Queue, ledger: Ledger) -> None:
    while (await queue.tick(QUEUE, ledger.handler, max=10, lease=2.0)).leased:
        pass


class AuditRecorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    async def emit(self, event: AuditEvent) -> None:
        self.names.append(event.name)

    def breaker(self) -> list[str]:
        return [name.rsplit(".", 1)[1] for name in self.names if ".breaker." in name]


def assert_useful(exc: QueueError, action: str) -> None:
    assert exc.code == "queue/backend-unavailable"
    assert exc.retryable
    assert action in exc.message or "circuit breaker is open" in exc.message, exc.message


# -- every fault shape, one call at a time --------------------------------------------------------
async def test_every_sqs_fault_is_a_retryable_backend_unavailable_error_after_the_retry_policy(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_tally: Tally,
) -> None:
    config = through(proxy, queues, retry=FAST_RETRY, breaker=NO_BREAKER)
    ledger = Ledger()
    acked: list[str] = []
    async with Queue(backends={"sqs": config}, sweep_interval=0) as queue:
        for fault in FAULTS:
            # A fault that outlasts the retry policy reaches the caller, nothing stored.
            proxy.reset_counts()
            with (
                proxy.outage(fault, actions={"SendMessageBatch"}),
                pytest.raises(QueueError) as refused,
            ):
                await queue.enqueue(QUEUE, {"key": f"refused-{fault.name}"})
            assert_useful(refused.value, "SendMessageBatch")
            assert (fault.query_code or "ConnectionClosedError") in refused.value.message
            # botocore retries nothing: each try of the policy is one request.
            assert proxy.requests("SendMessageBatch") == FAST_RETRY["attempts"]

            # One shorter than the policy: the caller never hears of it.
            proxy.reset_counts()
            proxy.inject(fault, actions={"SendMessageBatch"}, times=FAST_RETRY["attempts"] - 1)
            acked.append(await queue.enqueue(QUEUE, {"key": f"transient-{fault.name}"}))
            assert proxy.requests("SendMessageBatch", "forwarded") == 1

            # The same for a lease (ReceiveMessage) and a settlement (DeleteMessageBatch).
            proxy.inject(fault, actions={"ReceiveMessage"}, times=FAST_RETRY["attempts"] - 1)
            proxy.inject(fault, actions={"DeleteMessageBatch"}, times=FAST_RETRY["attempts"] - 1)
            result = await queue.tick(QUEUE, ledger.handler, max=10, lease=2.0)
            assert (result.leased, result.succeeded) == (1, 1)

        # A lease that fails past the policy raises from tick(); a settlement that does is
        # counted unsettled and the job comes back after its lease.
        acked.append(await queue.enqueue(QUEUE, {"key": "unsettled"}))
        with (
            proxy.outage(SERVICE_UNAVAILABLE, actions={"ReceiveMessage"}),
            pytest.raises(QueueError) as lease_refused,
        ):
            await queue.tick(QUEUE, ledger.handler, max=10, lease=2.0)
        assert_useful(lease_refused.value, "ReceiveMessage")
        with proxy.outage(INTERNAL_FAILURE, actions={"DeleteMessageBatch"}):
            result = await queue.tick(QUEUE, ledger.handler, max=10, lease=1.0)
        assert (result.leased, result.unsettled) == (1, 1)
        with anyio.fail_after(HANG_GUARD):
            while True:  # back after its 1 s lease
                if (await queue.tick(QUEUE, ledger.handler, max=10, lease=2.0)).succeeded:
                    break
                await anyio.sleep(0.2)
        assert await queue.size(QUEUE) == 0

    lost = set(acked) - set(ledger.by_id)
    reliability_tally.add(
        "sqs-fault-answers (one call at a time)",
        f"sqs/{anyio_backend}",
        enqueued=len(acked),
        completed=len(set(acked) & set(ledger.by_id)),
        run_more_than_once=ledger.twice(),
        lost=len(lost),
        faults_injected=sum(proxy.injected().values()),
    )
    assert not lost
    assert not [key for key in ledger.by_key if key.startswith("refused-")], "nothing stored"
    # The job whose settlement failed ran twice (at least once, by design); no other did.
    assert ledger.twice() == 1
    assert ledger.by_key["unsettled"] == 2


# -- a batch cut short part-way --------------------------------------------------------------------
async def test_a_batch_cut_short_names_the_jobs_stored_by_every_try_of_the_call(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_tally: Tally,
) -> None:
    config = through(proxy, queues, retry=FAST_RETRY, breaker=NO_BREAKER)
    ledger = Ledger()
    async with Queue(backends={"sqs": config}, sweep_interval=0) as queue:
        # The first SendMessageBatch (payloads 0-9) is stored; every later one is refused.
        rule = proxy.inject(SERVICE_UNAVAILABLE, actions={"SendMessageBatch"}, skip=1)
        with pytest.raises(QueueError) as cut:
            await queue.enqueue_many(QUEUE, [{"key": f"k{n}"} for n in range(25)])
        proxy.remove(rule)
        # The policy's later tries sent only what was not stored yet...
        assert proxy.requests("SendMessageBatch") == 1 + FAST_RETRY["attempts"]
        # ...and the error the caller reads says what is stored, though the last try stored
        # nothing (it used to say nothing of it then).
        assert_useful(cut.value, "SendMessageBatch")
        assert "10 of 25 job(s) were stored" in cut.value.message
        assert "payloads 0-9 of the list" in cut.value.message
        assert "enqueue only the others again" in cut.value.message
        await drain(queue, ledger)
    assert sorted(ledger.by_key) == sorted(f"k{n}" for n in range(10))
    reliability_tally.add(
        "sqs-batch-cut-short (SendMessageBatch refused after the first 10)",
        f"sqs/{anyio_backend}",
        enqueued=0,  # the call failed: nothing acknowledged...
        completed=0,
        run_more_than_once=ledger.twice(),
        stored_and_run_though_the_call_failed=len(ledger.by_key),
    )
    assert ledger.twice() == 0


# -- the ambiguous case: SQS stored the batch, the answer was lost --------------------------------
async def test_an_enqueue_whose_answer_is_lost_is_stored_anyway_copies_possible_never_loss(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_tally: Tally,
) -> None:
    figures: dict[str, int] = {}
    acked: list[str] = []
    ledgers: list[Ledger] = []
    for kind, url in (("standard", queues.url), ("fifo", queues.fifo_url)):
        ledger = Ledger()
        ledgers.append(ledger)
        config = through(proxy, queues, url=url, retry=FAST_RETRY, breaker=NO_BREAKER)
        async with Queue(backends={"sqs": config}, sweep_interval=0) as queue:
            # Lost once: the policy's second try sends the batch again and is acknowledged.
            proxy.inject(LOSE_ANSWER, actions={"SendMessageBatch"}, times=1)
            once = await queue.enqueue_many(QUEUE, [{"key": f"{kind}-once-{n}"} for n in range(10)])
            acked += once
            # Lost on every try: the caller hears of a failure, yet SQS has the jobs.
            with (
                proxy.outage(LOSE_ANSWER, actions={"SendMessageBatch"}),
                pytest.raises(QueueError) as refused,
            ):
                await queue.enqueue_many(QUEUE, [{"key": f"{kind}-unacked-{n}"} for n in range(10)])
            assert_useful(refused.value, "SendMessageBatch")
            assert "may have applied the request" in refused.value.message
            assert "may be stored, and then run, although this call failed" in (
                refused.value.message
            )
            messages = await anyio.to_thread.run_sync(stored, url)
            await drain(queue, ledger)
            assert await queue.size(QUEUE) == 0
        unacked = {key for key in ledger.by_key if "-unacked-" in key}
        assert len(unacked) == 10, "a failed call whose request reached SQS: stored, and run"
        figures[f"{kind}_messages_stored_for_20_jobs"] = messages
        figures[f"{kind}_runs_of_20_jobs"] = sum(ledger.by_id.values())
        if kind == "fifo":
            # The deduplication id is the job id: SQS drops the copies (for 5 minutes).
            assert messages == 20
        else:
            # A standard queue has no deduplication: every try stored a copy (2 of each acked
            # job, 3 of each unacked one)...
            assert messages == 10 * 2 + 10 * FAST_RETRY["attempts"]
        # ...and one process runs each job once: a copy of a job it completed, or of one it is
        # handing out, is deleted on receipt.  (Another process may run a copy: see the
        # scenario with two consumers.)
        assert all(count == 1 for count in ledger.by_id.values()), ledger.by_id
        assert len(ledger.by_id) == 20

    ran = collections.Counter[str]()
    for ledger in ledgers:
        ran.update(ledger.by_id)
    lost = set(acked) - set(ran)
    reliability_tally.add(
        "sqs-answer-lost (ambiguous enqueue)",
        f"sqs/{anyio_backend}",
        enqueued=len(acked),
        completed=len(set(acked) & set(ran)),
        run_more_than_once=sum(1 for job_id in acked if ran[job_id] > 1),
        lost=len(lost),
        **figures,
    )
    assert not lost


# -- producers and consumers through transient faults of every kind ------------------------------
async def test_producers_and_consumers_ride_out_transient_sqs_faults_losing_nothing(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_form: Form,
    reliability_reports: Reports,
) -> None:
    batches = reliability_form.pick(8, 50)  # per producer, 10 jobs each, 2 producers
    guard = reliability_form.pick(HANG_GUARD, 10 * HANG_GUARD)
    retry = {"attempts": 4, "base": 0.01, "cap": 0.1}
    breaker = {"failure_threshold": 5, "reset_timeout": 1.0}
    config = through(proxy, queues, retry=retry, breaker=breaker)
    # Every kind of fault on every action the workload uses, spread through the run.
    proxy.inject(THROTTLING, actions={"SendMessageBatch"}, every=5)
    proxy.inject(LOSE_ANSWER, actions={"SendMessageBatch"}, every=13)
    proxy.inject(SERVICE_UNAVAILABLE, actions={"ReceiveMessage"}, every=6)
    proxy.inject(REQUEST_THROTTLED, actions={"ReceiveMessage"}, every=7)
    proxy.inject(LOSE_ANSWER, actions={"ReceiveMessage"}, every=29)
    proxy.inject(INTERNAL_FAILURE, actions={"DeleteMessageBatch"}, every=4)
    proxy.inject(LOSE_ANSWER, actions={"DeleteMessageBatch"}, every=11)
    proxy.inject(DROP, actions={"ChangeMessageVisibilityBatch"}, every=3)

    ledger = Ledger(fail_first=True)
    acked: list[str] = []
    acked_keys: set[str] = set()
    errors: list[QueueError] = []
    retried_batches = 0

    async def produce(queue: Queue, producer: int) -> None:
        nonlocal retried_batches
        for batch in range(batches):
            payloads = [
                {"key": f"p{producer}-{batch}-{n}", "fail_first": n == 0} for n in range(10)
            ]
            while True:
                try:
                    ids = await queue.enqueue_many(QUEUE, payloads)
                except QueueError as exc:
                    # As the error says: try again (a new call, new job ids: if the lost
                    # answer's batch was stored, its jobs run too, under their first ids).
                    errors.append(exc)
                    retried_batches += 1
                    await anyio.sleep(0.05)
                    continue
                acked.extend(ids)
                acked_keys.update(str(payload["key"]) for payload in payloads)
                break

    workers = [
        Queue(backends={"sqs": config}, sweep_interval=0) for _ in range(2)
    ]  # two worker "processes", each with its own client and breaker
    producer_queue = Queue(backends={"sqs": config}, sweep_interval=0)
    async with producer_queue, workers[0], workers[1]:
        consumers = [
            await worker.consume(
                QUEUE, ledger.handler, concurrency=10, lease=2.0, poll_interval=0.1
            )
            for worker in workers
        ]
        async with anyio.create_task_group() as producers:
            for producer in range(2):
                producers.start_soon(produce, producer_queue, producer)
        await ledger.until(lambda: set(acked) <= ledger.by_id.keys(), "every acked job ran", guard)
        await emptied(queues.url, guard)
        assert not any(consumer.stopped for consumer in consumers), "no consumer died"
        stats = [consumer.stats for consumer in consumers]
        for consumer in consumers:
            consumer.cancel()
            await consumer.wait_stopped()

    for exc in errors:
        assert_useful(exc, "SendMessageBatch")
    lost = set(acked) - set(ledger.by_id)
    unsettled = sum(s.unsettled for s in stats)
    injected = proxy.injected()
    lost_sends = proxy.requests("SendMessageBatch", LOSE_ANSWER.name)
    # Every extra run is accounted for: a send whose answer was lost stored a copy of up to 10
    # jobs, a settlement that failed past the retry policy lets its job come back.
    extra_runs = sum(ledger.by_id.values()) - len(ledger.by_id)
    assert extra_runs <= 10 * lost_sends + unsettled
    unacked_runs = sum(n for key, n in ledger.by_key.items() if key not in acked_keys)
    reliability_reports.add(
        ScenarioReport(
            scenario="sqs-transient-faults (2 producers, 2 consumers)",
            backend=f"sqs/{anyio_backend}",
            form=reliability_form.name,
            enqueued=len(acked),
            completed=len(set(acked) & set(ledger.by_id)),
            run_more_than_once=ledger.twice(),
            lost=len(lost),
            details={
                "faults": injected,
                "requests": proxy.requests(),
                "caller_errors": len(errors),
                "batches_sent_again": retried_batches,
                "lost_send_answers": lost_sends,
                "unsettled": unsettled,
                "extra_runs": extra_runs,
                "runs_of_unacked_jobs": unacked_runs,
                "failed_on_purpose": ledger.failed_on_purpose,
            },
        )
    )
    assert not lost
    assert sum(injected.values()) > 0


# -- a sustained outage: the breaker opens, then closes -----------------------------------------
async def test_a_sustained_sqs_outage_opens_the_breaker_and_it_closes_after_losing_nothing(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_form: Form,
    reliability_reports: Reports,
) -> None:
    outage_seconds = reliability_form.pick(2.0, 20.0)
    reset_timeout = 1.0
    audit = AuditRecorder()
    config = through(
        proxy,
        queues,
        retry={"attempts": 2, "base": 0.01, "cap": 0.02},
        breaker={"failure_threshold": 3, "reset_timeout": reset_timeout},
    )
    ledger = Ledger()
    acked: list[str] = []
    errors: list[QueueError] = []

    async def slow(job: Job, ctx: JobContext) -> None:
        await anyio.sleep(0.05)  # some jobs are in flight when the outage starts
        await ledger.handler(job, ctx)

    queue = Queue(backends={"sqs": config}, sweep_interval=0, audit_sinks=[audit])
    async with queue:
        consumer = await queue.consume(QUEUE, slow, concurrency=4, lease=2.0, poll_interval=0.1)
        acked += await queue.enqueue_many(QUEUE, [{"key": f"before-{n}"} for n in range(40)])
        await ledger.until(lambda: len(ledger.by_id) >= 10, "the consumer got going")

        # Every request fails: half answered 503, half cut off.
        started = time.monotonic()
        breaker_opened_after: float | None = None
        fast_failures = 0
        outage = [proxy.inject(DROP, every=2), proxy.inject(SERVICE_UNAVAILABLE)]
        try:
            with anyio.fail_after(HANG_GUARD):
                while time.monotonic() - started < outage_seconds or not fast_failures:
                    try:
                        key = f"during-{len(errors)}"
                        acked.append(await queue.enqueue(QUEUE, {"key": key}))
                    except QueueError as exc:
                        errors.append(exc)
                        if "circuit breaker is open" in exc.message:
                            fast_failures += 1
                    if breaker_opened_after is None and "open" in audit.breaker():
                        breaker_opened_after = time.monotonic() - started
                    await anyio.sleep(0.05)
        finally:
            for rule in outage:
                proxy.remove(rule)
        ended = time.monotonic()
        assert "open" in audit.breaker(), "the outage opened the breaker"
        assert fast_failures, "an open breaker fails fast"
        assert not consumer.stopped, "the consumer rides the outage out"

        # The producer does what the error says: it tries again until SQS answers.
        rest = [{"key": f"after-{n}"} for n in range(40)]
        after_errors = 0
        with anyio.fail_after(HANG_GUARD):
            while True:
                try:
                    acked += await queue.enqueue_many(QUEUE, rest)
                    break
                except QueueError as exc:
                    errors.append(exc)
                    after_errors += 1
                    await anyio.sleep(0.1)
        await ledger.until(lambda: set(acked) <= ledger.by_id.keys(), "every acked job ran")
        recovery = time.monotonic() - ended
        await emptied(queues.url)
        assert queue.list_backends()[0].breaker_state == "closed"
        assert not consumer.stopped
        consumer.cancel()
        await consumer.wait_stopped()
        stats = consumer.stats

    transitions = audit.breaker()
    assert transitions[0] == "open"
    assert transitions[-1] == "close"
    for exc in errors:
        assert_useful(exc, "SendMessageBatch")
    lost = set(acked) - set(ledger.by_id)
    # A job whose settlement the outage refused comes back after its lease and runs again.
    assert ledger.twice() <= stats.unsettled
    reliability_reports.add(
        ScenarioReport(
            scenario="sqs-sustained-outage (503 + dropped connections)",
            backend=f"sqs/{anyio_backend}",
            form=reliability_form.name,
            enqueued=len(acked),
            completed=len(set(acked) & set(ledger.by_id)),
            run_more_than_once=ledger.twice(),
            lost=len(lost),
            recovery_seconds=recovery,
            details={
                "outage_s": round(ended - started, 2),
                "breaker_open_after_s": round(breaker_opened_after or 0.0, 2),
                "caller_errors": len(errors),
                "fast_failures": fast_failures,
                "errors_after_outage": after_errors,
                "breaker": "->".join(transitions),
                "unsettled": stats.unsettled,
                "requests_refused": sum(proxy.injected().values()),
            },
        )
    )
    assert not lost


# -- botocore's retries and ours ----------------------------------------------------------------
async def test_botocore_retries_are_off_in_the_backends_client_and_multiply_in_your_own(
    proxy: FaultProxy,
    queues: SqsQueues,
    anyio_backend: str,
    reliability_tally: Tally,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import boto3
    import botocore.config

    caplog.set_level(logging.WARNING, logger="blamequeue.sqs")
    ours = through(proxy, queues, retry=FAST_RETRY, breaker=NO_BREAKER)
    async with Queue(backends={"sqs": ours}, sweep_interval=0) as queue:
        proxy.reset_counts()
        with proxy.outage(THROTTLING, actions={"GetQueueAttributes"}), pytest.raises(QueueError):
            await queue.size(QUEUE)
        requests_ours = proxy.requests("GetQueueAttributes")
    assert requests_ours == FAST_RETRY["attempts"]

    # A client of your own keeps botocore's retries (standard mode: 3 tries by default; 2
    # here to keep the test short): every try of the policy makes that many requests.
    own = boto3.client(
        "sqs",
        endpoint_url=proxy.endpoint,
        region_name=REGION,
        config=botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 2}),
    )
    theirs = {k: v for k, v in ours.items() if k not in ("endpoint_url", "region")}
    assert not any("retries each request itself" in r.getMessage() for r in caplog.records)
    async with Queue(backends={"sqs": {**theirs, "client": own}}, sweep_interval=0) as queue:
        # Opening the backend says so, and what to do.
        [warning] = [r for r in caplog.records if "retries each request itself" in r.getMessage()]
        assert "(2 tries)" in warning.getMessage()
        assert "'total_max_attempts': 1" in warning.getMessage()
        proxy.reset_counts()
        with (
            proxy.outage(THROTTLING, actions={"GetQueueAttributes"}),
            pytest.raises(QueueError) as refused,
        ):
            await queue.size(QUEUE)
        assert_useful(refused.value, "GetQueueAttributes")
        requests_theirs = proxy.requests("GetQueueAttributes")
        # A fault botocore absorbs never reaches the policy or the breaker.
        proxy.reset_counts()
        proxy.inject(THROTTLING, actions={"GetQueueAttributes"}, times=1)
        assert await queue.size(QUEUE) == 0
        absorbed = proxy.requests("GetQueueAttributes")
    own.close()
    assert requests_theirs == 2 * FAST_RETRY["attempts"]
    assert absorbed == 2
    # A default client tries 3 times; the bench's client counts requests, so it tries once.
    assert botocore_tries(boto3.client("sqs", region_name=REGION)) == 3
    bench = await anyio.to_thread.run_sync(sqs_dev_server, proxy.endpoint)
    try:
        assert botocore_tries(bench.requests) == 1
    finally:
        await anyio.to_thread.run_sync(bench.cleanup)
    reliability_tally.add(
        "sqs-retry-layers (botocore vs the retry policy)",
        f"sqs/{anyio_backend}",
        enqueued=0,
        completed=0,
        requests_per_failed_call_backend_client=str(requests_ours),
        requests_per_failed_call_own_client=str(requests_theirs),
    )
