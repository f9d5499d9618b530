"""The worker process of the soak scenario (run as a script, not collected by pytest).

usage: soak_worker.py CONFIG QUEUE JOBS LEDGER PROGRESS EVENT_LOOP CONCURRENCY SWEEP_INTERVAL

Consumes QUEUE on the backend CONFIG (a JSON backend config) with a no-op handler that appends
``<job id>`` to LEDGER, until SIGTERM; then shuts the queue down and exits 0.  Its own process,
so the RSS the test samples is a worker's and nothing else's.

Every lease call the consumer makes is timed (a wrapper around the backend's ``lease``: the
call the consumer awaits, round trip and all).  JOBS, the backlog the test filled before
starting this worker, turns the jobs leased so far into the backlog a call met.  Once a second,
and once more on the way out, one JSON line goes to PROGRESS: jobs succeeded so far, the lease
calls of that second (count, jobs, summed and largest seconds), and, once their calls are
over, the durations of the calls made in a few windows of the backlog (see ``_windows``).  All
of it is a few counters and two short lists: the instrument must not grow with the run it
measures.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from blamequeue import Job, JobContext, Queue

#: Lease calls are kept one by one in windows of ``_WINDOW`` jobs of backlog: one just below
#: the full backlog, after ``_WARM_UP`` jobs (the worker warms up: imports, caches, the first
#: pages of the database), and one centred on each power of ten below it down to 1,000.
_WARM_UP = 1_000
_WINDOW = 1_000


def _windows(jobs: int) -> dict[str, tuple[int, int]]:
    """``name -> (from, down to)``: the backlogs (jobs pending at a call) of each window."""
    top = jobs - _WARM_UP
    windows = {"full": (top, top - _WINDOW)}
    power = 1_000
    while power + _WINDOW // 2 < top - _WINDOW:
        windows[f"{power // 1000}k"] = (power + _WINDOW // 2, power - _WINDOW // 2)
        power *= 10
    return windows


class LeaseTimer:
    """Times the calls to one backend's ``lease`` and files them by the backlog they met."""

    def __init__(self, jobs: int) -> None:
        self.backlog = jobs
        self.windows = _windows(jobs)
        self.kept: dict[str, list[tuple[float, int]]] = {name: [] for name in self.windows}
        self.calls = 0
        self.jobs = 0
        self.seconds = 0.0
        self.slowest = 0.0

    def wrap(self, lease: Callable[..., Awaitable[list[Any]]]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> list[Any]:
            backlog = self.backlog
            started = time.perf_counter()
            leases = await lease(*args, **kwargs)
            took = time.perf_counter() - started
            self.backlog -= len(leases)
            self.calls += 1
            self.jobs += len(leases)
            self.seconds += took
            self.slowest = max(self.slowest, took)
            for name, (high, low) in self.windows.items():
                if low < backlog <= high and leases:
                    self.kept[name].append((took, len(leases)))
            return leases

        return timed

    def window(self) -> dict[str, Any]:
        """The counters since the last call, reset."""
        out = {
            "lease_calls": self.calls,
            "lease_jobs": self.jobs,
            "lease_s": self.seconds,
            "lease_max_s": self.slowest,
            "backlog": self.backlog,
        }
        self.calls = self.jobs = 0
        self.seconds = self.slowest = 0.0
        return out


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    config_text, queue_name, jobs_text, ledger_path, progress_path = sys.argv[1:6]
    event_loop, concurrency, sweep_interval = sys.argv[6:9]
    config = json.loads(config_text)
    timer = LeaseTimer(int(jobs_text))
    ledger = open(ledger_path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    progress = open(progress_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    async def handler(job: Job, ctx: JobContext) -> None:
        ledger.write(job.id + "\n")

    async def run() -> None:
        queue = Queue(backends={"soak": config}, sweep_interval=float(sweep_interval))
        async with queue:
            # The consumer looks the method up on each call, so the instance attribute is used.
            backend = queue._runtimes["soak"].backend
            backend.lease = timer.wrap(backend.lease)  # type: ignore[method-assign]
            consumer = await queue.consume(queue_name, handler, concurrency=int(concurrency))
            reported: set[str] = set()

            def report() -> None:
                ledger.flush()
                line: dict[str, Any] = {
                    "t": time.monotonic(),
                    "succeeded": consumer.stats.succeeded,
                    "failed": consumer.stats.failed,
                    "stale": consumer.stats.stale,
                    **timer.window(),
                }
                for name, (_high, low) in timer.windows.items():
                    if name not in reported and timer.backlog <= low:
                        line[f"window_{name}"] = timer.kept[name]
                        reported.add(name)
                progress.write(json.dumps(line) + "\n")

            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def every_second() -> None:
                        while True:
                            await anyio.sleep(1.0)
                            report()

                    tg.start_soon(every_second)
                    async for _ in signals:
                        break
                    tg.cancel_scope.cancel()
            consumer.cancel()
            await consumer.wait_stopped()
            report()
        ledger.close()

    anyio.run(run, backend=event_loop)


if __name__ == "__main__":
    main()
