"""A producer process with tracing: ``python traced_producer.py DB_PATH QUEUE...`` enqueues one
job on each queue of the local database, each inside a span ``request QUEUE``, and prints the
finished spans as JSON."""

from __future__ import annotations

import json
import sys

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from blamequeue import Queue


async def main(path: str, *queue_names: str) -> None:
    async with Queue(backends={"local": {"protocol": "local", "path": path}}) as queue:
        for queue_name in queue_names:
            with trace.get_tracer("producer").start_as_current_span(f"request {queue_name}"):
                await queue.enqueue(queue_name, {"order": 42})


if __name__ == "__main__":
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    anyio.run(main, *sys.argv[1:])
    spans = exporter.get_finished_spans()
    print(
        json.dumps(
            [
                {
                    "name": span.name,
                    "trace_id": span.context.trace_id,
                    "span_id": span.context.span_id,
                    "parent_id": span.parent.span_id if span.parent else None,
                }
                for span in spans
            ]
        )
    )
