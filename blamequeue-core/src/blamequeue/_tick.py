"""One serverless-style drain: sweep, lease a batch, run it, settle, return.  Nothing is left
running when it returns (no timer, no resident task, no heartbeat: a handler that needs longer
than ``lease`` calls ``ctx.extend_lease``)."""

from __future__ import annotations

import anyio

from ._backoff import Backoff, BackoffFunction
from ._execution import Attempt, Handler, SettleCounts, release, run_attempt, settle
from ._limits import lease_call
from ._models import TickResult
from ._runtime import BackendRuntime
from .abc import LeaseLimits
from .errors import QueueError

__all__ = ["run_tick"]


async def _run_one(
    runtime: BackendRuntime, attempt: Attempt, handler: Handler, counts: SettleCounts
) -> None:
    try:
        attempt.settlement = await run_attempt(runtime, attempt, handler)
    except anyio.get_cancelled_exc_class():
        # The caller cancelled the tick: hand the job back now instead of after its lease.
        attempt.settlement = release(runtime, attempt)
        with anyio.CancelScope(shield=True):
            await settle(runtime, [attempt], counts)
        raise
    # The handler ran: record its outcome even if the tick is cancelled meanwhile.
    with anyio.CancelScope(shield=True):
        await settle(runtime, [attempt], counts)


async def run_tick(
    runtime: BackendRuntime,
    queue_name: str,
    handler: Handler,
    *,
    max_jobs: int,
    lease: float,
    concurrency: int,
    limits: LeaseLimits | None = None,
    backoff: Backoff | BackoffFunction | None = None,
) -> TickResult:
    runtime.refuse_if_key_missing()
    leases = await runtime.call(
        "lease",
        lease_call(
            runtime,
            queue_name,
            limit=max_jobs,
            now=runtime.clock.now(),
            lease_seconds=lease,
            limits=limits,
        ),
    )
    runtime.leased(queue_name, len(leases))
    counts = SettleCounts()
    attempts = [Attempt.start(lease_, backoff=backoff) for lease_ in leases]
    try:
        if concurrency == 1:
            for attempt in attempts:  # one after another, in lease order
                await _run_one(runtime, attempt, handler, counts)
        else:
            limiter = anyio.CapacityLimiter(concurrency)

            async def limited(attempt: Attempt) -> None:
                async with limiter:
                    await _run_one(runtime, attempt, handler, counts)

            async with anyio.create_task_group() as tg:
                for attempt in attempts:
                    tg.start_soon(limited, attempt)
    except anyio.get_cancelled_exc_class():
        # Jobs leased but not started yet must not wait out their lease (and lose an attempt):
        # hand them back with the ones that were running.
        waiting = [a for a in attempts if a.settlement is None]
        for attempt in waiting:
            attempt.settlement = release(runtime, attempt)
        with anyio.CancelScope(shield=True):
            await settle(runtime, waiting, counts)
        raise
    try:
        depth: int | None = await runtime.call("size", lambda: runtime.backend.size(queue_name))
    except QueueError:
        depth = None  # unknown is not empty
    return TickResult(
        leased=len(leases),
        succeeded=counts.succeeded,
        failed=counts.failed,
        stale=counts.stale,
        unsettled=counts.unsettled,
        moved_to_dlq=counts.moved_to_dlq,
        may_have_more=len(leases) >= max_jobs,
        queue_depth=depth,
        deferred=counts.deferred,
    )
