"""Tracing and metrics in one file: a request enqueues a job inside its span, a worker runs it
twice (the first attempt fails), and the trace and the job counters are printed.

Run it with ``python docs/examples/tracing.py`` after
``pip install 'blamequeue[otel]' opentelemetry-sdk`` (SQLite in a temporary folder).
"""

import logging
import tempfile

import anyio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from blamequeue import Job, JobContext, Queue

# The application's SDK set-up. In production: an OTLP exporter behind a BatchSpanProcessor,
# and a PeriodicExportingMetricReader; kept in memory here to print them below.
spans = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(tracer_provider)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

tracer = trace.get_tracer("shop")
logging.getLogger("blamequeue").setLevel(logging.ERROR)  # the failed attempt is expected


async def charge(job: Job, ctx: JobContext) -> None:
    with tracer.start_as_current_span("call the card service"):  # a child of `process charges`
        if job.attempts == 1:
            raise ConnectionError("card service unreachable")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = {"protocol": "local", "path": f"{folder}/jobs.db"}
        async with Queue(backends={"main": config}) as queue:
            with tracer.start_as_current_span("POST /orders"):
                await queue.enqueue("charges", {"order": 42}, backoff=[0])
            # The worker: here, or in any other process on the same database.
            await queue.tick("charges", charge)  # attempt 1 fails: retried at once
            await queue.tick("charges", charge)  # attempt 2 succeeds

    finished = sorted(spans.get_finished_spans(), key=lambda span: span.start_time or 0)
    depth = {}
    for span in finished:
        parent = span.parent.span_id if span.parent else None
        depth[span.context.span_id] = depth.get(parent, -1) + 1
        status = "" if span.status.is_ok else f"  [{span.status.description}]"
        print("  " * depth[span.context.span_id] + span.name + status)

    data = reader.get_metrics_data()
    for metric in sorted(data.resource_metrics[0].scope_metrics[0].metrics, key=lambda m: m.name):
        if metric.name.startswith("blamequeue.jobs."):
            print(metric.name, sum(point.value for point in metric.data.data_points))


if __name__ == "__main__":
    anyio.run(main)
