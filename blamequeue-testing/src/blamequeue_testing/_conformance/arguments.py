"""SPEC §2 errors: bad input is refused with a stable code before anything is stored, calls
before ``start`` are ``queue/not-initialized``, an unknown backend name is
``queue/unknown-backend``."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import pytest

from blamequeue import Queue, QueueError

from .cases import each
from .fixtures import Conformance, succeed
from .refusals import refused, refused_at_once

__all__ = ["TestBadInput", "TestLifecycleErrors"]

_Call = Callable[[Queue, str], Awaitable[object]]


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


_BAD_PAYLOADS: dict[str, Callable[[], Any]] = {
    "object": object,
    "set": lambda: {1, 2},
    "bytes": lambda: b"raw",
    "nan": lambda: math.nan,
    "infinity": lambda: {"x": math.inf},
    "datetime": lambda: {"when": datetime(2024, 1, 1)},
    "circular": _circular,
    "nested-object": lambda: {"ok": [1, 2, {"bad": object()}]},
}

_BAD_ENQUEUE_OPTIONS: dict[str, dict[str, Any]] = {
    "negative-delay": {"delay": -1},
    "nan-delay": {"delay": math.nan},
    "infinite-delay": {"delay": math.inf},
    "string-delay": {"delay": "5"},
    "float-priority": {"priority": 1.5},
    "string-priority": {"priority": "1"},
    "bool-priority": {"priority": True},
    "priority-above-int32": {"priority": 2**31},
    "priority-below-int32": {"priority": -(2**31) - 1},
    "zero-max-attempts": {"max_attempts": 0},
    "negative-max-attempts": {"max_attempts": -1},
    "bool-max-attempts": {"max_attempts": True},
    "float-max-attempts": {"max_attempts": 2.0},
    "non-string-trace-id": {"trace_id": 123},
    "non-string-classification": {"classification": 1},
    "string-backoff": {"backoff": "fast"},
    "empty-backoff-schedule": {"backoff": []},
    "negative-backoff-delay": {"backoff": [-1]},
    "unknown-backoff-strategy": {"backoff": {"strategy": "sometimes"}},
    "backoff-missing-its-delay": {"backoff": {"strategy": "fixed"}},
}

_BAD_QUEUE_NAMES: dict[str, Any] = {
    "empty": "",
    "blank": "   ",
    "none": None,
    "number": 5,
    "control-character": "a\nb",
}

_BAD_CONSUME_OPTIONS: dict[str, dict[str, Any]] = {
    "zero-concurrency": {"concurrency": 0},
    "negative-concurrency": {"concurrency": -1},
    "bool-concurrency": {"concurrency": True},
    "float-concurrency": {"concurrency": 1.5},
    "zero-lease": {"lease": 0},
    "negative-lease": {"lease": -5},
    "nan-lease": {"lease": math.nan},
    "infinite-lease": {"lease": math.inf},
    "zero-poll-interval": {"poll_interval": 0},
    "negative-fast-poll": {"fast_poll": -1},
    "rate-limit-of-zero": {"rate_limit": {"max": 0, "per_seconds": 10}},
    "rate-limit-unknown-key": {"rate_limit": {"max": 1, "per": 10}},
    "rate-limit-string": {"rate_limit": "2/s"},
}

_BAD_TICK_OPTIONS: dict[str, dict[str, Any]] = {
    "zero-max": {"max": 0},
    "negative-max": {"max": -1},
    "bool-max": {"max": True},
    "zero-lease": {"lease": 0},
    "nan-lease": {"lease": math.nan},
    "zero-concurrency": {"concurrency": 0},
}

_BAD_RUN_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    **{f"consume-{option}": ("consume", bad) for option, bad in _BAD_CONSUME_OPTIONS.items()},
    **{f"tick-{option}": ("tick", bad) for option, bad in _BAD_TICK_OPTIONS.items()},
}
"""Per case, the call that runs handlers (``consume`` or ``tick``) and the bad options it gets."""

_NOT_STARTED_CALLS: dict[str, _Call] = {
    "enqueue": lambda q, n: q.enqueue(n, 1),
    "enqueue_many": lambda q, n: q.enqueue_many(n, [1]),
    "consume": lambda q, n: q.consume(n, succeed),
    "tick": lambda q, n: q.tick(n, succeed),
    "size": lambda q, n: q.size(n),
    "purge": lambda q, n: q.purge(n),
    "dlq_list": lambda q, n: q.dlq_list(n),
    "dlq_size": lambda q, n: q.dlq_size(n),
    "dlq_purge": lambda q, n: q.dlq_purge(n),
    "dlq_retry": lambda q, n: q.dlq_retry("job-" + "0" * 26),
    "sweep": lambda q, n: q.sweep(),
}

_UNKNOWN_BACKEND_CALLS: dict[str, _Call] = {
    "enqueue": lambda q, n: q.enqueue(n, 1, backend="nope"),
    "enqueue_many": lambda q, n: q.enqueue_many(n, [1], backend="nope"),
    "consume": lambda q, n: q.consume(n, succeed, backend="nope"),
    "tick": lambda q, n: q.tick(n, succeed, backend="nope"),
    "size": lambda q, n: q.size(n, backend="nope"),
    "purge": lambda q, n: q.purge(n, backend="nope"),
    "dlq_list": lambda q, n: q.dlq_list(n, backend="nope"),
    "dlq_size": lambda q, n: q.dlq_size(n, backend="nope"),
    "dlq_purge": lambda q, n: q.dlq_purge(n, backend="nope"),
    "dlq_retry": lambda q, n: q.dlq_retry("job-" + "0" * 26, backend="nope"),
    "sweep": lambda q, n: q.sweep(backend="nope"),
}


async def _refused(call: Awaitable[object], code: str) -> QueueError:
    error = await refused(code, call)
    assert error.message  # says what to do
    return error


@asynccontextmanager
async def _one_job_left_untouched(conformance: Conformance) -> AsyncIterator[tuple[Queue, str]]:
    """The test's queue and name, holding one job that the body must leave leasable."""
    await conformance.queue.enqueue(conformance.name, "untouched")
    yield conformance.queue, conformance.name
    assert await conformance.leasable() == 1


@pytest.mark.anyio
class TestBadInput:
    @each("payload", _BAD_PAYLOADS)
    async def test_non_json_payload_is_refused_and_nothing_stored(
        self, conformance: Conformance, payload: Callable[[], Any]
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "already there")
        bad = payload()
        await _refused(q.enqueue(name, bad), "queue/bad-payload")
        await _refused(q.enqueue_many(name, ["fine", bad]), "queue/bad-payload")
        assert await conformance.size() == 1

    @each("kwargs", _BAD_ENQUEUE_OPTIONS)
    async def test_bad_enqueue_argument_is_refused_and_nothing_stored(
        self, conformance: Conformance, kwargs: dict[str, Any]
    ) -> None:
        q, name = conformance.queue, conformance.name
        await _refused(q.enqueue(name, "x", **kwargs), "queue/bad-argument")
        await _refused(q.enqueue_many(name, ["x", "y"], **kwargs), "queue/bad-argument")
        assert await conformance.size() == 0

    @each("bad", _BAD_QUEUE_NAMES)
    async def test_bad_queue_name_is_refused_and_nothing_stored(
        self, conformance: Conformance, bad: Any
    ) -> None:
        q = conformance.queue
        await _refused(q.enqueue(bad, "x"), "queue/bad-argument")
        await _refused(q.enqueue_many(bad, ["x"]), "queue/bad-argument")
        await _refused(q.size(bad), "queue/bad-argument")
        await _refused(q.purge(bad), "queue/bad-argument")
        await _refused(q.tick(bad, succeed), "queue/bad-argument")
        await _refused(q.consume(bad, succeed), "queue/bad-argument")

    async def test_enqueue_many_refuses_a_payload_that_is_not_a_list(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        for payloads in ("abc", {"a": 1}, 5, None):
            await _refused(q.enqueue_many(name, payloads), "queue/bad-argument")  # type: ignore[arg-type]
        assert await conformance.size() == 0

    @each("call, options", _BAD_RUN_OPTIONS)
    async def test_bad_consume_or_tick_argument_is_refused_and_nothing_leased(
        self, conformance: Conformance, call: str, options: dict[str, Any]
    ) -> None:
        async with _one_job_left_untouched(conformance) as (q, name):
            run = q.consume if call == "consume" else q.tick
            await _refused(run(name, succeed, **options), "queue/bad-argument")

    async def test_handler_that_is_not_callable_is_refused(self, conformance: Conformance) -> None:
        async with _one_job_left_untouched(conformance) as (q, name):
            await _refused(q.consume(name, None), "queue/bad-argument")  # type: ignore[arg-type]
            await _refused(q.tick(name, "handler"), "queue/bad-argument")  # type: ignore[arg-type]

    async def test_bad_dlq_arguments_are_refused(self, conformance: Conformance) -> None:
        conformance.require("dlq", "the dead-letter calls are unsupported")
        q, name = conformance.queue, conformance.name
        await _refused(q.dlq_list(name, limit=0), "queue/bad-argument")
        await _refused(q.dlq_retry(""), "queue/bad-argument")
        await _refused(q.dlq_retry(None), "queue/bad-argument")  # type: ignore[arg-type]


@pytest.mark.anyio
class TestLifecycleErrors:
    @each("call", _NOT_STARTED_CALLS)
    async def test_calls_before_start_raise_not_initialized(
        self, conformance: Conformance, call: _Call
    ) -> None:
        queue = conformance.factory.build()
        await _refused(call(queue, conformance.name), "queue/not-initialized")

    async def test_list_backends_before_start_raises_not_initialized(
        self, conformance: Conformance
    ) -> None:
        refused_at_once("queue/not-initialized", conformance.factory.build().list_backends)

    @each("call", _NOT_STARTED_CALLS)
    async def test_calls_after_shutdown_raise_not_initialized(
        self, conformance: Conformance, call: _Call
    ) -> None:
        queue = conformance.factory.build()
        await queue.start()
        await queue.shutdown()
        await _refused(call(queue, conformance.name), "queue/not-initialized")

    @each("call", _UNKNOWN_BACKEND_CALLS)
    async def test_unknown_backend_name_raises_unknown_backend(
        self, conformance: Conformance, call: _Call
    ) -> None:
        q, name = conformance.queue, conformance.name
        await _refused(call(q, name), "queue/unknown-backend")
        assert await conformance.size() == 0
