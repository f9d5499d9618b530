"""The OpenTelemetry SDK in the tests, switched on only while a tracing test runs.

A process has one tracer provider, set once.  Set to the SDK's for good, every job that any
later test of the process enqueued would carry a trace context; so the provider set here is
a switch: the SDK's tracer while :func:`recording` is entered, the API's no-op tracer
otherwise (what a process without an SDK has).  Metrics have no such side effect: the SDK's
meter provider records all along, and each test reads the points of its own queues.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sqs.moto_server import REGION

__all__ = [
    "Recording",
    "backend_config",
    "metric_points",
    "recording",
    "span_named",
]

SEAL = {"keys": {"tracing": base64.b64encode(secrets.token_bytes(32)).decode("ascii")}}


class _Switch(trace.TracerProvider):
    def __init__(self, sdk: TracerProvider) -> None:
        self.sdk = sdk
        self.on = False

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwitchedTracer(self, self.sdk.get_tracer(*args, **kwargs))


class _SwitchedTracer(trace.Tracer):
    _off = trace.NoOpTracer()

    def __init__(self, switch: _Switch, sdk: trace.Tracer) -> None:
        self._switch = switch
        self._sdk = sdk

    def _tracer(self) -> trace.Tracer:
        return self._sdk if self._switch.on else self._off

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer().start_as_current_span(*args, **kwargs)


@attrs.define
class Recording:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    switch: _Switch

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    @contextmanager
    def off(self) -> Iterator[None]:
        """No tracing meanwhile: as in a process without an SDK."""
        self.switch.on = False
        try:
            yield
        finally:
            self.switch.on = True


_installed: Recording | None = None


@contextmanager
def recording() -> Iterator[Recording]:
    global _installed
    if _installed is None:
        exporter = InMemorySpanExporter()
        sdk = TracerProvider()
        sdk.add_span_processor(SimpleSpanProcessor(exporter))
        switch = _Switch(sdk)
        trace.set_tracer_provider(switch)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _installed = Recording(exporter=exporter, reader=reader, switch=switch)
    _installed.exporter.clear()
    _installed.switch.on = True
    try:
        yield _installed
    finally:
        _installed.switch.on = False
        _installed.exporter.clear()


def span_named(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    (found,) = [span for span in spans if span.name == name]
    return found


def metric_points(reader: InMemoryMetricReader, name: str, queue: str) -> list[Any]:
    """The points of metric ``name`` whose destination is ``queue``."""
    data = reader.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
        if point.attributes.get("messaging.destination.name") == queue
    ]


def backend_config(request: pytest.FixtureRequest, protocol: str, tmp_path: Path) -> dict[str, Any]:
    """A sealed config of ``protocol``, on a store of this test's own."""
    if protocol == "memory":
        return {"protocol": "memory", "seal": SEAL}
    if protocol == "local":
        return {"protocol": "local", "path": str(tmp_path / "jobs.db"), "seal": SEAL}
    if protocol == "redis":
        url = request.getfixturevalue("tracing_redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushall()
        return {"protocol": "redis", "url": url, "seal": SEAL}
    endpoint = request.getfixturevalue("sqs_endpoint")
    return {
        "protocol": "sqs",
        "queue_url": f"{endpoint}/123456789012/t{secrets.token_hex(5)}-{{queue}}",
        "endpoint_url": endpoint,
        "region": REGION,
        "create_queues": True,
        "dlq_scan_wait": 0,
        "seal": SEAL,
    }
