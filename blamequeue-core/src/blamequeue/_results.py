"""Job results (SPEC §10): encoding a handler's return value, waiting for a job to finish, and
reading the results of a flow job's dependencies.

A result travels through the same codec as payloads (sealed at rest), wrapped in a one-key
envelope: ``{"value": ...}``, or ``{"unserialisable": "<why>"}`` for a return value JSON cannot
hold (the job still completes: its side effects happened; ``Queue.result`` then raises
``queue/bad-payload``), or ``{"unserialisable": "<why>", "code": "queue/payload-too-large"}``
for one whose JSON is over the backend's ``max_payload_bytes`` (``Queue.result`` raises that
code).  ``None`` is stored as nothing at all, so handlers that return nothing
cost the hot path nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from ._codec import Codec, dumps, job_place
from ._flows import flow_name
from ._job_seals import last_error_of
from ._retention import done_retention
from ._runtime import BackendRuntime
from ._validation import MAX_SECONDS_TEXT, is_duration
from .abc import Flows, Inspection, JobWatch, StoredJob
from .errors import (
    BadArgumentError,
    JobFailedError,
    NotFoundError,
    ResultTimeoutError,
)

__all__ = [
    "LIVE_STATES",
    "POLL_MAX",
    "check_timeout",
    "decode_result",
    "dependency_results",
    "encode_result",
    "not_found",
    "require_results",
    "wait_for_result",
]

log = logging.getLogger("blamequeue")

#: States a job can still leave; every other state is an end (``done``, ``dead``, and any
#: state a later version adds, such as ``cancelled``).
LIVE_STATES = frozenset({"pending", "inflight", "parked"})
#: The first look at a job not yet finished comes this soon; each later one waits twice as
#: long, up to :data:`POLL_MAX` (a backend that publishes settlements wakes the waiter sooner).
POLL_START = 0.05
POLL_MAX = 1.0


def result_place(queue: str, job_id: str) -> bytes:
    """Where a job's sealed result belongs."""
    return job_place("result", queue, job_id)


def encode_result(
    codec: Codec,
    value: Any,
    queue: str,
    job_id: str,
    *,
    max_bytes: int | None = None,
    log_extra: Mapping[str, Any] | None = None,
) -> str | None:
    """What a ``done`` settlement stores for the handler's return value; one whose JSON is
    over ``max_bytes`` (the backend's ``max_payload_bytes``) is not kept, like one JSON
    cannot hold: the job completes and ``Queue.result`` raises the error's code."""
    if value is None:
        return None
    where = result_place(queue, job_id)
    try:
        return codec.seal_text(dumps({"value": value}, max_bytes), where)
    except BadArgumentError as exc:
        why = f"{type(value).__name__}: {exc.__cause__ or exc.message}"
        log.warning(
            "job %s returned a value that cannot be kept (%s); the job completes, but result() "
            "will raise %s",
            job_id,
            why,
            exc.code,
            extra=log_extra,
        )
        envelope = {"unserialisable": why}
        if exc.code == "queue/payload-too-large":
            envelope["code"] = exc.code
        return codec.seal_text(dumps(envelope), where)


def decode_result(codec: Codec, stored: StoredJob) -> Any:
    """The value a ``done`` job's handler returned (``None`` when it returned nothing)."""
    if stored.result is None:
        return None
    envelope = codec.decode_payload(stored.result, result_place(stored.queue, stored.id))
    if isinstance(envelope, dict) and "value" in envelope:
        return envelope["value"]
    why = envelope.get("unserialisable") if isinstance(envelope, dict) else None
    if isinstance(envelope, dict) and envelope.get("code") == "queue/payload-too-large":
        raise BadArgumentError(
            "queue/payload-too-large",
            f"job {stored.id!r} completed, but its handler returned a value too large to keep "
            f"({why}), so no result was kept; return a smaller value (e.g. where the data was "
            f"stored) or raise the backend's max_payload_bytes",
        )
    raise BadArgumentError(
        "queue/bad-payload",
        f"job {stored.id!r} completed, but its handler returned a value JSON cannot hold "
        f"({why or 'unreadable result'}), so no result was kept; return JSON-serialisable data "
        f"(dict, list, str, int, float, bool, None) from the handler",
    )


def require_results(runtime: BackendRuntime, what: str) -> None:
    caps = runtime.backend.capabilities
    if not (caps.results and caps.inspection):
        raise runtime.unsupported(
            "queue/results-unsupported",
            f"keeps no job results, so it cannot {what}; use a backend whose capabilities "
            f"include results (e.g. 'local', 'redis', 'memory'), or have the handler write its "
            f"outcome to your store",
        )


def check_timeout(timeout: Any) -> float:
    """``None`` (no limit) becomes ``inf``; anything but seconds >= 0 is refused."""
    if timeout is None:
        return math.inf
    if not is_duration(timeout):
        raise BadArgumentError(
            "queue/bad-argument",
            f"timeout must be seconds >= 0 and at most {MAX_SECONDS_TEXT} (or None to wait as "
            f"long as it takes), got {timeout!r}",
        )
    return float(timeout)


def not_found(runtime: BackendRuntime, job_id: str) -> NotFoundError:
    return NotFoundError(
        "queue/job-not-found",
        f"backend {runtime.name!r} holds no job {job_id!r}: the id is unknown, the job was "
        f"purged, or it finished and was pruned ({done_retention(runtime)}); keep done jobs "
        f"longer to read their results later",
    )


def failed(stored: StoredJob, last_error: str | None) -> JobFailedError:
    head = (last_error or "no error recorded").split("\n", 1)[0]
    return JobFailedError(
        f"job {stored.id!r} on {stored.queue!r} ended {stored.state} after {stored.attempts} "
        f"attempt(s): {head}; inspect it with dlq_list() (the full error is in .last_error) "
        f"and dlq_retry() it once the cause is fixed",
        job_id=stored.id,
        state=stored.state,
        last_error=last_error,
    )


def outcome(runtime: BackendRuntime, stored: StoredJob) -> Any:
    """The result of a finished job, or its failure raised."""
    if stored.state == "done":
        return decode_result(runtime.codec, stored)
    raise failed(stored, last_error_of(runtime.codec, stored))


async def get_stored(runtime: BackendRuntime, job_id: str) -> StoredJob | None:
    backend = Inspection.of(runtime.backend)
    return await runtime.call("get_job", lambda: backend.get_job(job_id))


async def wait_for_result(runtime: BackendRuntime, job_id: str, timeout: float) -> Any:
    """``Queue.result``: look, then wait on the backend's watch (pushed settlements where the
    backend has them, else polling that slows from 50 ms to 1 s), until the job ends or
    ``timeout`` seconds of the queue's clock pass."""
    clock = runtime.clock
    deadline = clock.now() + timeout
    poll = POLL_START
    async with runtime.backend.watch_job(job_id) as watch:
        while True:
            stored = await get_stored(runtime, job_id)
            if stored is None:
                raise not_found(runtime, job_id)
            if stored.state not in LIVE_STATES:
                return outcome(runtime, stored)
            if not await _wait(watch, clock.now, deadline, poll):
                raise ResultTimeoutError(
                    "queue/result-timeout",
                    f"job {job_id!r} on {stored.queue!r} did not finish within {timeout:g} s "
                    f"(it is {stored.state}, attempt {stored.attempts} of "
                    f"{stored.max_attempts}); call result() again to keep waiting, pass a "
                    f"longer timeout, or check that a worker consumes {stored.queue!r}",
                )
            poll = min(poll * 2, POLL_MAX)


async def _wait(watch: JobWatch, now: Callable[[], float], deadline: float, poll: float) -> bool:
    """Wait until the watch says the job may have changed, or ``poll`` passed; progress
    events are skipped.  False when the deadline had already passed."""
    remaining = deadline - now()
    if remaining <= 0:
        return False
    end = min(deadline, now() + poll)
    while (remaining := end - now()) > 0:
        if await watch.next_event(remaining) is None:
            break
    return True


async def dependency_results(
    runtime: BackendRuntime, job_id: str, flow_id: str | None
) -> dict[str, Any]:
    """``ctx.dependency_results()``: ``{child name: result}`` of every job the flow job
    ``job_id`` depends on (``{}`` outside a flow), read in one backend call."""
    if flow_id is None:
        return {}
    require_results(runtime, "hand a flow job its dependencies' results")
    backend = Flows.of(runtime.backend)
    rows = await runtime.call("flow_jobs", lambda: backend.flow_jobs(flow_id))
    by_id = {row.id: row for row in rows}
    me = by_id.get(job_id)
    if me is None:
        raise not_found(runtime, job_id)
    results: dict[str, Any] = {}
    for dep_id in me.depends_on:
        dep = by_id.get(dep_id)
        if dep is None:
            raise NotFoundError(
                "queue/job-not-found",
                f"dependency {dep_id!r} of flow job {job_id!r} is no longer stored: it finished "
                f"and was pruned ({done_retention(runtime)}); keep done jobs at "
                f"least as long as a flow takes to read its results",
            )
        if dep.state != "done":  # unreachable unless the flow was tampered with
            raise failed(dep, last_error_of(runtime.codec, dep))
        results[flow_name(dep.meta) or dep.id] = decode_result(runtime.codec, dep)
    return results
