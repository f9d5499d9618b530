"""OpenTelemetry (SPEC §16): ``enqueue`` starts a ``send`` span whose trace context travels in
the job, the worker's ``process`` span is its child on every backend and across processes,
attributes follow the messaging semantic conventions, failures are errors, and the metrics
count outcomes and durations.  Without ``opentelemetry`` nothing of it is imported."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from tracing_helpers import Recording, backend_config, metric_points, span_named

from blamequeue import Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture(params=["memory", "local"])
async def queue(
    request: pytest.FixtureRequest, tmp_path: Path, clock: VirtualClock
) -> AsyncIterator[Queue]:
    """A queue on an in-process backend (the round trip through every backend has its own
    test)."""
    config = backend_config(request, request.param, tmp_path)
    async with Queue(backends={"b": config}, clock=clock, sweep_interval=0) as started:
        yield started


async def done(job: Job, ctx: JobContext) -> None:
    pass


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


@pytest.mark.parametrize("protocol", ["memory", "local", "redis", "sqs"])
async def test_the_process_span_is_a_child_of_the_send_span_on_every_backend(
    request: pytest.FixtureRequest, tmp_path: Path, otel: Recording, protocol: str
) -> None:
    config = backend_config(request, protocol, tmp_path)
    async with Queue(backends={"b": config}, clock=VirtualClock(), sweep_interval=0) as queue:
        with trace.get_tracer("app").start_as_current_span("request"):
            job_id = await queue.enqueue("orders", {"order": 42})
        assert (await queue.tick("orders", done)).succeeded == 1
    spans = otel.spans()
    request_span = span_named(spans, "request")
    send, process = span_named(spans, "send orders"), span_named(spans, "process orders")
    assert (send.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert parent_id(send) == request_span.context.span_id
    assert parent_id(process) == send.context.span_id
    assert process.context.trace_id == send.context.trace_id == request_span.context.trace_id
    common = {
        "messaging.system": "blamequeue",
        "messaging.destination.name": "orders",
        "messaging.message.id": job_id,
    }
    assert {**common, "messaging.operation.type": "send"}.items() <= dict(send.attributes).items()
    assert {
        **common,
        "messaging.operation.type": "process",
        "messaging.blamequeue.attempt": 1,
    }.items() <= dict(process.attributes).items()
    assert process.status.status_code is StatusCode.UNSET


async def test_a_failed_attempt_is_an_error_and_its_retry_is_still_a_child_of_the_send(
    queue: Queue, otel: Recording
) -> None:
    async def fails_once(job: Job, ctx: JobContext) -> None:
        if job.attempts == 1:
            raise ValueError("card declined")

    job_id = await queue.enqueue("charges", {"order": 7}, max_attempts=2, backoff=[0])
    assert (await queue.tick("charges", fails_once)).failed == 1
    assert (await queue.tick("charges", fails_once)).succeeded == 1
    spans = otel.spans()
    send = span_named(spans, "send charges")
    first, retry = [span for span in spans if span.name == "process charges"]
    attempts = [span.attributes["messaging.blamequeue.attempt"] for span in (first, retry)]
    assert attempts == [1, 2]
    for attempt in (first, retry):
        assert parent_id(attempt) == send.context.span_id
        assert attempt.attributes["messaging.message.id"] == job_id
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "ValueError: card declined"
    assert first.attributes["error.type"] == "ValueError"
    (event,) = first.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "ValueError"
    assert retry.status.status_code is StatusCode.UNSET
    assert not retry.events


async def test_enqueue_many_is_one_send_span_parent_of_every_job(
    queue: Queue, otel: Recording
) -> None:
    await queue.enqueue_many("mails", [{"to": "ada"}, {"to": "bob"}])
    assert (await queue.tick("mails", done)).succeeded == 2
    spans = otel.spans()
    send = span_named(spans, "send mails")
    assert send.attributes["messaging.batch.message_count"] == 2
    processed = [span for span in spans if span.name == "process mails"]
    assert len(processed) == 2
    assert {span.parent.span_id for span in processed if span.parent} == {send.context.span_id}


async def test_a_batch_dispatch_is_one_send_span_parent_of_every_job_of_the_batch(
    queue: Queue, otel: Recording
) -> None:
    @queue.task(queue="invoices")
    async def invoice(payload: Any, ctx: JobContext) -> None:
        pass

    with trace.get_tracer("app").start_as_current_span("request"):
        batch = await queue.batch([queue.job(invoice, 1), queue.job(invoice, 2)]).dispatch()
        (added,) = await batch.add([queue.job(invoice, 3)])
    assert (await queue.tick("invoices", queue.tasks)).succeeded == 3
    spans = otel.spans()
    request_span = span_named(spans, "request")
    first, more = [span for span in spans if span.name == "send invoices"]
    for send, count in ((first, 2), (more, 1)):
        assert send.kind is SpanKind.PRODUCER
        assert parent_id(send) == request_span.context.span_id
        assert {
            "messaging.system": "blamequeue",
            "messaging.destination.name": "invoices",
            "messaging.operation.type": "send",
            "messaging.batch.message_count": count,
            "messaging.blamequeue.batch.id": batch.id,
        }.items() <= dict(send.attributes).items()
    assert more.attributes["messaging.message.id"] == added
    parents = sorted(parent_id(span) for span in spans if span.name == "process invoices")
    assert parents == sorted([first.context.span_id] * 2 + [more.context.span_id])


async def test_a_task_dispatch_is_a_send_span_and_its_job_names_the_task(
    queue: Queue, otel: Recording
) -> None:
    @queue.task(queue="reports")
    async def build_report(payload: Any, ctx: JobContext) -> None:
        pass

    job_id = await build_report.dispatch({"month": "2026-12"})
    assert (await queue.tick("reports", queue.tasks)).succeeded == 1
    spans = otel.spans()
    send, process = span_named(spans, "send reports"), span_named(spans, "process reports")
    assert send.attributes["messaging.message.id"] == job_id
    assert parent_id(process) == send.context.span_id
    assert process.attributes["messaging.blamequeue.task"] == build_report.settings.name


async def test_a_job_enqueued_without_tracing_is_processed_in_a_trace_of_its_own(
    queue: Queue, otel: Recording
) -> None:
    # A producer without an SDK (or without opentelemetry at all), inside its own span.
    with otel.off(), trace.get_tracer("app").start_as_current_span("untraced request"):
        await queue.enqueue("legacy", {"n": 1})
    assert (await queue.tick("legacy", done)).succeeded == 1
    (process,) = otel.spans()
    assert process.name == "process legacy"
    assert process.parent is None


async def test_metrics_count_each_outcome_and_record_wait_and_processing_seconds(
    queue: Queue, otel: Recording, clock: VirtualClock
) -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        clock.advance(0.5)
        if job.payload == "bad":
            raise ValueError("bad")

    name = f"metered-{secrets.token_hex(4)}"  # the SDK's sums are the process's, all along
    await queue.enqueue(name, "good")
    await queue.enqueue(name, "bad", max_attempts=1)
    clock.advance(2)
    assert (await queue.tick(name, handler)).moved_to_dlq == 1

    def value(metric: str) -> Any:
        (point,) = metric_points(otel.reader, metric, name)
        assert point.attributes["messaging.system"] == "blamequeue"
        return point

    assert value("blamequeue.jobs.processed").value == 1
    assert value("blamequeue.jobs.failed").value == 1
    assert value("blamequeue.jobs.dead").value == 1
    processing = value("blamequeue.job.process.duration")
    assert (processing.count, processing.sum) == (2, 1.0)
    waiting = value("blamequeue.job.wait.duration")
    # Due for 2 s when the tick began; the second job also waited for the first's handler.
    assert (waiting.count, waiting.sum) == (2, 4.5)


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """A local database holding a job per event loop, enqueued by another process with
    tracing, and the spans that process finished (by name)."""
    path = str(tmp_path_factory.mktemp("producer") / "shared.db")
    command = [sys.executable, str(HERE / "traced_producer.py"), path]
    producer = subprocess.run(
        [*command, "shipping-asyncio", "shipping-trio"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert producer.returncode == 0, producer.stderr
    return path, {span["name"]: span for span in json.loads(producer.stdout)}


async def test_a_send_span_from_another_process_is_the_parent(
    produced: tuple[str, dict[str, Any]], otel: Recording, anyio_backend: str
) -> None:
    path, spans = produced
    queue_name = f"shipping-{anyio_backend}"
    async with Queue(backends={"local": {"protocol": "local", "path": path}}) as queue:
        assert (await queue.tick(queue_name, done)).succeeded == 1
    process = span_named(otel.spans(), f"process {queue_name}")
    send = spans[f"send {queue_name}"]
    assert send["parent_id"] == spans[f"request {queue_name}"]["span_id"]
    assert process.context.trace_id == send["trace_id"]
    assert parent_id(process) == send["span_id"]


def test_without_opentelemetry_nothing_of_it_is_imported_and_jobs_run() -> None:
    script = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # not installed\n"
        "import anyio, blamequeue\n"
        "from blamequeue_testing import VirtualClock\n"
        "async def main():\n"
        "    config = {'protocol': 'memory'}\n"
        "    async with blamequeue.Queue(backends={'m': config}, clock=VirtualClock()) as q:\n"
        "        await q.enqueue('e', 1)\n"
        "        print((await q.tick('e', lambda job, ctx: None)).succeeded)\n"
        "anyio.run(main)\n"
        "print([name for name, m in sys.modules.items() if 'opentelemetry' in name and m])\n"
        "from blamequeue import _execution\n"
        "print(hasattr(_execution.run_attempt, '__wrapped__'))\n"
    )
    done_ = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done_.returncode == 0, done_.stderr
    assert done_.stdout.splitlines() == ["1", "[]", "False"]
