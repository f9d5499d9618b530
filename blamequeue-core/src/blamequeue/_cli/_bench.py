"""``blamequeue bench``: the numbers of SPEC §13 for one backend, with the defaults a user gets
(heartbeats on, default durability): enqueue jobs/s (one await per job, 50 such enqueues in
flight, and enqueue_many), processed jobs/s at a concurrency, idle enqueue-to-start latency,
peak RSS, and optionally the processing rate with a large backlog pending (lease cost must not
grow with it)."""

from __future__ import annotations

import argparse
import base64
import functools
import json
import platform
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from blamequeue import Job, Queue, __version__
from blamequeue._plugins import load_registry
from blamequeue.errors import QueueError

from ._bench_processes import drain_in_processes
from ._config import new_database
from ._lateness import (
    DELAYED_JOBS,
    LATE_QUEUE,
    RETRIED_JOBS,
    delayed_lateness,
    delayed_lateness_elsewhere,
    lateness_of,
    retry_lateness,
)
from ._output import add_json_option
from ._running import (
    EXIT_OK,
    Subparsers,
    UsageError,
    add_command,
    add_loop_option,
    positive_int,
    run_on_loop,
    stopped_by_signals,
)
from ._terminal import ProgressBar, Terminal, format_table, progress_terminal

__all__ = ["add_parser", "run"]


_BATCH = 1000
_JOBS = 20_000
# moto's server (the default sqs endpoint) slows down with queue length.
_SQS_JOBS = 500
_BACKLOG_BATCH = 10_000
_SINGLE_MAX = 5000
# Producers awaiting enqueue() at once in the "enqueue (N in flight)" figure.
_IN_FLIGHT = 50


_MANUAL = """\
measure enqueue/processing throughput, latency and memory of a backend

Measure a backend's throughput, latency and memory with the defaults a
user gets (heartbeats on, default durability).

examples:
  blamequeue bench                                  # SQLite, 20000 jobs, concurrency 50
  blamequeue bench --backend memory --jobs 2000 --json
  blamequeue bench --loop trio --concurrency 10
  blamequeue bench --backlog 1000 1000000           # lease cost with 1e3 and 1e6 jobs pending
  blamequeue bench --processes 1 2 4                # 1, 2 and 4 worker processes draining
  blamequeue bench --backend redis                  # a temporary redis-server on a free port
  blamequeue bench --backend redis --url redis://127.0.0.1:6379/0
  blamequeue bench --backend sqs                    # a temporary moto SQS server
  blamequeue bench --backend sqs --endpoint-url http://localhost:4566 --jobs 5000

what is measured (in this one process unless said, on a fresh database unless --path):
  enqueue          jobs/s awaiting enqueue() once per job, over min(--jobs, 5000) jobs
  enqueue (50 in flight)
                   the same with 50 tasks each awaiting enqueue() once per job at once
  enqueue_many     jobs/s enqueuing --jobs jobs in batches of 1000
  processed        jobs/s consuming those jobs with a no-op async handler at --concurrency
  latency          enqueue -> handler start on an idle consumer, p50/p99 over --samples jobs
  latency, other process
                   the same with the consumer in a worker process of its own (local, redis)
  lateness         handler start minus due time, p50/p99, on an idle consumer with the
                   default poll_interval: 30 jobs delayed 0.1-0.6 s, 20 retries after a
                   fixed 0.3 s backoff, and (local, redis) 30 delayed jobs run by a worker
                   process of its own (not sqs, whose delays count whole seconds)
  backlog N        processed jobs/s over min(N, --jobs) jobs with N jobs pending
  processes N      processed jobs/s over --jobs jobs by N worker processes of the bench's
                   own, each a consumer at --concurrency (local, redis)
  peak RSS         the process's maximum resident memory
Results vary with the machine; compare runs on the same one.  The bench writes to queues
named bench-*.
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "bench", _MANUAL, run=run)
    parser.add_argument(
        "--backend",
        choices=("local", "memory", "redis", "sqs"),
        default="local",
        help="protocol to measure (default: local, the SQLite backend)",
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="Redis server for --backend redis (keys under a prefix of their own, deleted "
        "afterwards). Default: a temporary redis-server on a free port",
    )
    parser.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="SQS endpoint for --backend sqs (queues of its own, deleted afterwards; "
        "credentials from the boto3 chain). Default: a temporary moto server",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="jobs (default: 20000; 500 for sqs, whose test server slows with queue length)",
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        type=positive_int,
        default=50,
        metavar="C",
        help="handlers running at once while processing (default: 50)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=200,
        metavar="N",
        help="latency samples (default: 200)",
    )
    parser.add_argument(
        "--backlog",
        type=positive_int,
        nargs="+",
        default=[],
        metavar="N",
        help="also measure processing with N jobs already pending (e.g. 1000 1000000)",
    )
    parser.add_argument(
        "--processes",
        type=positive_int,
        nargs="+",
        default=[],
        metavar="N",
        help="also measure processing by N worker processes at once (e.g. 1 2 4; local, redis)",
    )
    add_loop_option(parser)
    parser.add_argument(
        "--path",
        metavar="FILE",
        help="SQLite file for --backend local (must not exist yet; kept afterwards). "
        "Default: a temporary file, deleted afterwards",
    )
    add_json_option(parser, what="object")


class _Status:
    """A progress bar while a phase runs, on ``term`` (None: none; see
    :func:`~._terminal.progress_terminal`)."""

    def __init__(self, term: Terminal | None) -> None:
        self._term = term
        self._bar: ProgressBar | None = None
        self.count = 0

    def begin(self, label: str, total: int) -> None:
        self.end()
        self.count = 0
        if self._term is not None and self._term.tty:
            self._bar = self._term.progress(total, f"{label:<31}")
            self._bar.update(0, force=True)

    def tick(self) -> None:
        self.count += 1

    def end(self) -> None:
        if self._bar is not None:
            self._bar.update(self.count, force=True)
            self._bar.close()
            self._bar = None

    async def redraw_forever(self) -> None:
        while True:
            if self._bar is not None:
                self._bar.update(self.count)
            await anyio.sleep(0.1)


def _rate(jobs: int, seconds: float) -> float:
    return round(jobs / seconds, 1) if seconds > 0 else float("inf")


async def _drain(
    queue: Queue, queue_name: str, jobs: int, concurrency: int, status: _Status
) -> float:
    """Seconds for a fresh consumer to run ``jobs`` no-op handlers."""
    finished = anyio.Event()

    async def noop(job: Job, ctx: Any) -> None:
        status.count += 1
        if status.count == jobs:
            finished.set()

    started = time.perf_counter()
    consumer = await queue.consume(queue_name, noop, concurrency=concurrency)
    await finished.wait()
    elapsed = time.perf_counter() - started
    consumer.cancel()
    await consumer.wait_stopped()
    return elapsed


async def _latency(queue: Queue, samples: int, status: _Status) -> list[float]:
    """Enqueue one job at a time to an idle consumer; seconds from enqueue to handler start."""
    started_at = 0.0
    arrived = anyio.Event()

    async def record(job: Job, ctx: Any) -> None:
        nonlocal started_at
        started_at = time.perf_counter()
        arrived.set()

    consumer = await queue.consume("bench-latency", record)
    results: list[float] = []
    for n in range(samples):
        arrived = anyio.Event()
        sent_at = time.perf_counter()
        await queue.enqueue("bench-latency", {"n": n})
        await arrived.wait()
        results.append(started_at - sent_at)
        status.count += 1
        # Back to idle: the job settled and the consumer waits for work again.
        # The engine has no settle notification; a 1 ms poll does not touch the measurement.
        while consumer.stats.succeeded + consumer.stats.failed <= n:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        await anyio.sleep(0.002)
    consumer.cancel()
    await consumer.wait_stopped()
    return results


# The consumer of the cross-process latency: a worker process of its own whose handler answers
# the moment it started (time.time(): one clock for every process of the machine).
# Its config (the sealing key in it) comes on its standard input, never on its command line.
_LATENCY_WORKER = """
import sys
from blamequeue._cli._bench import latency_worker
latency_worker(sys.stdin.readline(), sys.argv[1])
"""
_CROSS_QUEUE = "bench-latency-process"
#: Backends whose queues another process shares (memory's live in this process only; SQS's
#: test server answers long polls late by design).
_CROSS_PROCESS = ("local", "redis")


def latency_worker(config_json: str, loop: str) -> None:
    """Run in the child: consume the latency queue until standard input closes."""

    async def started_at(job: Job, ctx: Any) -> float:
        return time.time()

    async def late_by(job: Job, ctx: Any) -> float:
        return lateness_of(job)

    async def main() -> None:
        queue = Queue(backends={"bench": json.loads(config_json)})
        async with queue:
            await queue.consume(_CROSS_QUEUE, started_at)
            await queue.consume(LATE_QUEUE, late_by)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
            await queue.shutdown()

    run_on_loop(main, loop)


async def _from_another_process(
    queue: Queue, config: dict[str, Any], loop: str, samples: int, status: _Status
) -> tuple[list[float], list[float]]:
    """Seconds from enqueue here to handler start in a worker process, one idle job at a time;
    then the lateness of delayed jobs enqueued here and run there."""
    command = [sys.executable, "-c", _LATENCY_WORKER, loop]
    async with await anyio.open_process(command) as worker:
        assert worker.stdin is not None
        assert worker.stdout is not None
        await worker.stdin.send(json.dumps(config).encode() + b"\n")
        with anyio.fail_after(60):
            await worker.stdout.receive()  # "ready": its consumer is waiting for work
        results: list[float] = []
        try:
            for n in range(samples):
                sent_at = time.time()
                job_id = await queue.enqueue(_CROSS_QUEUE, {"n": n})
                started_at = await queue.result(job_id, timeout=30)
                results.append(started_at - sent_at)
                status.count += 1
                # Back to idle: the worker settles the job and blocks waiting for the next.
                await anyio.sleep(0.005)
            status.begin("lateness of delayed jobs, other process", DELAYED_JOBS)
            late = await delayed_lateness_elsewhere(queue, status.tick)
        finally:
            await worker.stdin.aclose()
            with anyio.move_on_after(30) as waited:
                await worker.wait()
            if waited.cancelled_caught:
                worker.kill()
    return results, late


async def _fill(queue: Queue, queue_name: str, jobs: int, batch: int, status: _Status) -> None:
    for start in range(0, jobs, batch):
        payloads = [{"n": n} for n in range(start, min(jobs, start + batch))]
        await queue.enqueue_many(queue_name, payloads)
        status.count += len(payloads)


def _peak_rss_mib() -> float | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    kib = peak / 1024 if sys.platform == "darwin" else peak
    return round(kib / 1024, 1)


async def _measure_enqueue(queue: Queue, jobs: int, status: _Status) -> dict[str, Any]:
    payloads = [{"n": n} for n in range(jobs)]
    status.begin("enqueue (one await per job)", jobs)
    started = time.perf_counter()
    for payload in payloads:
        await queue.enqueue("bench-enqueue", payload)
        status.count += 1
    seconds = time.perf_counter() - started
    return {"jobs": jobs, "seconds": round(seconds, 4), "jobs_per_s": _rate(jobs, seconds)}


async def _measure_enqueue_in_flight(queue: Queue, jobs: int, status: _Status) -> dict[str, Any]:
    """``jobs`` single enqueues from :data:`_IN_FLIGHT` tasks, each awaiting one at a time."""
    payloads = iter([{"n": n} for n in range(jobs)])

    async def produce() -> None:
        for payload in payloads:  # shared: each payload goes to whichever task is free
            await queue.enqueue("bench-enqueue-in-flight", payload)
            status.count += 1

    status.begin(f"enqueue ({_IN_FLIGHT} in flight)", jobs)
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(_IN_FLIGHT):
            tg.start_soon(produce)
    seconds = time.perf_counter() - started
    return {
        "jobs": jobs,
        "in_flight": _IN_FLIGHT,
        "seconds": round(seconds, 4),
        "jobs_per_s": _rate(jobs, seconds),
    }


async def _measure_enqueue_many(queue: Queue, jobs: int, status: _Status) -> dict[str, Any]:
    batches = [
        [{"n": n} for n in range(start, min(jobs, start + _BATCH))]
        for start in range(0, jobs, _BATCH)
    ]
    status.begin(f"enqueue_many (batches of {_BATCH})", jobs)
    started = time.perf_counter()
    for batch in batches:
        await queue.enqueue_many("bench-process", batch)
        status.count += len(batch)
    seconds = time.perf_counter() - started
    return {
        "jobs": jobs,
        "batch": _BATCH,
        "seconds": round(seconds, 4),
        "jobs_per_s": _rate(jobs, seconds),
    }


async def _measure_latency(queue: Queue, samples: int, status: _Status) -> dict[str, Any]:
    status.begin("idle latency", samples)
    return _summary(await _latency(queue, samples, status))


def _summary(samples: list[float]) -> dict[str, Any]:
    latencies = sorted(samples)
    p99 = (
        statistics.quantiles(latencies, n=100, method="inclusive")[98]
        if len(latencies) > 1
        else latencies[0]
    )
    return {
        "samples": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
    }


async def _measure_backlog(
    queue: Queue, pending: int, jobs: int, concurrency: int, status: _Status
) -> dict[str, Any]:
    name = f"bench-backlog-{pending}"
    status.begin(f"fill backlog {pending:,}", pending)
    await _fill(queue, name, pending, _BACKLOG_BATCH, status)
    sample = min(pending, jobs)
    status.begin(f"processed, {pending:,} pending", sample)
    seconds = await _drain(queue, name, sample, concurrency, status)
    return {
        "pending": pending,
        "jobs": sample,
        "seconds": round(seconds, 4),
        "jobs_per_s": _rate(sample, seconds),
    }


async def _measure(
    queue: Queue,
    args: argparse.Namespace,
    config: dict[str, Any],
    status: _Status,
    result: dict[str, Any],
    requests: Any = None,
) -> None:
    jobs, concurrency = args.jobs, args.concurrency
    result["enqueue"] = await _measure_enqueue(queue, min(jobs, _SINGLE_MAX), status)
    result["enqueue_in_flight"] = await _measure_enqueue_in_flight(
        queue, min(jobs, _SINGLE_MAX), status
    )
    if requests is not None:
        requests.reset()  # SQS requests per job: enqueue_many, then consume (a backlog)
    result["enqueue_many"] = await _measure_enqueue_many(queue, jobs, status)
    status.begin(f"processed (concurrency {concurrency})", jobs)
    seconds = await _drain(queue, "bench-process", jobs, concurrency, status)
    if requests is not None:
        result["sqs_requests"] = {
            "jobs": jobs,
            "requests": requests.total,
            "per_job": round(requests.total / jobs, 4),
            "by_action": requests.snapshot(),
        }
    result["processed"] = {
        "jobs": jobs,
        "concurrency": concurrency,
        "seconds": round(seconds, 4),
        "jobs_per_s": _rate(jobs, seconds),
    }
    result["latency"] = await _measure_latency(queue, args.samples, status)
    if not load_registry().protocols[config["protocol"]].value.capabilities.store_clock:
        # (SQS keeps delays on its own timers, which count whole seconds: not measured.)
        status.begin("lateness of delayed jobs", DELAYED_JOBS)
        lateness = {"delayed": _summary(await delayed_lateness(queue, status.tick))}
        status.begin("lateness of retries", RETRIED_JOBS)
        lateness["retry"] = _summary(await retry_lateness(queue, status.tick))
        result["lateness"] = lateness
    if config["protocol"] in _CROSS_PROCESS:
        status.begin("idle latency from another process", args.samples)
        samples, late = await _from_another_process(queue, config, args.loop, args.samples, status)
        result["latency_other_process"] = _summary(samples)
        result.setdefault("lateness", {})["delayed_other_process"] = _summary(late)
    result["backlog"] = [
        await _measure_backlog(queue, pending, jobs, concurrency, status)
        for pending in sorted(set(args.backlog))
    ]
    result["processes"] = [
        await _measure_processes(queue, config, args.loop, count, jobs, concurrency, status)
        for count in sorted(set(args.processes))
    ]


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


async def _measure_processes(
    queue: Queue,
    config: dict[str, Any],
    loop: str,
    processes: int,
    jobs: int,
    concurrency: int,
    status: _Status,
) -> dict[str, Any]:
    name = f"bench-processes-{processes}"
    status.begin(f"fill for {_processes(processes)}", jobs)
    await _fill(queue, name, jobs, _BATCH, status)

    def progress(count: int) -> None:
        status.count = count

    status.begin(f"processed, {_processes(processes)}", jobs)
    seconds = await drain_in_processes(
        config,
        loop,
        name,
        processes=processes,
        jobs=jobs,
        concurrency=concurrency,
        progress=progress,
    )
    return {
        "processes": processes,
        "jobs": jobs,
        "concurrency": concurrency,
        "seconds": round(seconds, 4),
        "jobs_per_s": _rate(jobs, seconds),
    }


async def _bench(
    args: argparse.Namespace,
    config: dict[str, Any],
    term: Terminal | None,
    requests: Any = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "blamequeue": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "backend": config["protocol"],
        "loop": args.loop,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
    }
    status = _Status(term)
    queue = Queue(backends={"bench": config})
    async with queue, stopped_by_signals(), anyio.create_task_group() as tg:
        tg.start_soon(status.redraw_forever)
        try:
            await _measure(queue, args, config, status, result, requests)
        finally:
            status.end()
            tg.cancel_scope.cancel()
    result["peak_rss_mib"] = _peak_rss_mib()
    return result


_LATENESS_ROWS = (
    ("delayed", "delayed jobs"),
    ("retry", "backoff retries"),
    ("delayed_other_process", "delayed, other process"),
)


def _report(result: dict[str, Any], where: str, term: Terminal) -> str:
    def rate(value: float) -> str:
        return f"{value:,.0f} jobs/s"

    latency = result["latency"]
    rows = [
        [
            "enqueue",
            rate(result["enqueue"]["jobs_per_s"]),
            f"one await per job, {result['enqueue']['jobs']:,} jobs",
        ],
        [
            f"enqueue ({result['enqueue_in_flight']['in_flight']} in flight)",
            rate(result["enqueue_in_flight"]["jobs_per_s"]),
            f"{result['enqueue_in_flight']['in_flight']} tasks, one await per job each, "
            f"{result['enqueue_in_flight']['jobs']:,} jobs",
        ],
        [
            "enqueue_many",
            rate(result["enqueue_many"]["jobs_per_s"]),
            f"batches of {result['enqueue_many']['batch']:,}, {result['jobs']:,} jobs",
        ],
        [
            "processed",
            rate(result["processed"]["jobs_per_s"]),
            f"no-op handler, concurrency {result['concurrency']}",
        ],
        [
            "latency p50",
            f"{latency['p50_ms']:.2f} ms",
            f"enqueue -> handler start, idle consumer, {latency['samples']} samples",
        ],
        ["latency p99", f"{latency['p99_ms']:.2f} ms", f"max {latency['max_ms']:.2f} ms"],
    ]
    other = result.get("latency_other_process")
    if other is not None:
        rows += [
            [
                "latency p50, other process",
                f"{other['p50_ms']:.2f} ms",
                f"the consumer in a worker process of its own, {other['samples']} samples",
            ],
            [
                "latency p99, other process",
                f"{other['p99_ms']:.2f} ms",
                f"max {other['max_ms']:.2f} ms",
            ],
        ]
    lateness = result.get("lateness", {})
    for key, what in _LATENESS_ROWS:
        late = lateness.get(key)
        if late is not None:
            rows.append(
                [
                    f"lateness, {what}",
                    f"{late['p50_ms']:.2f} / {late['p99_ms']:.2f} ms",
                    f"p50 / p99 after the due time, {late['samples']} samples",
                ]
            )
    for item in result["backlog"]:
        rows.append(
            [
                f"processed, {item['pending']:,} pending",
                rate(item["jobs_per_s"]),
                f"over {item['jobs']:,} jobs, concurrency {result['concurrency']}",
            ]
        )
    single = next((p["jobs_per_s"] for p in result["processes"] if p["processes"] == 1), None)
    for item in result["processes"]:
        ratio = "" if single is None else f", {item['jobs_per_s'] / single:.2f}x one process"
        rows.append(
            [
                f"processed, {_processes(item['processes'])}",
                rate(item["jobs_per_s"]),
                f"worker processes, concurrency {result['concurrency']} each{ratio}",
            ]
        )
    if "sqs_requests" in result:
        sqs = result["sqs_requests"]
        rows.append(
            [
                "SQS requests per job",
                f"{sqs['per_job']:.3f}",
                f"enqueue_many + consume, {sqs['requests']:,} requests for {sqs['jobs']:,} jobs",
            ]
        )
    rss = result["peak_rss_mib"]
    rows.append(["peak RSS", "n/a" if rss is None else f"{rss:.1f} MiB", "whole process"])
    head = term.style(
        f"blamequeue {result['blamequeue']} bench: backend {where}, loop {result['loop']}, "
        f"Python {result['python']}",
        "bold",
    )
    table = format_table(["metric", "result", "how"], rows, align="lrl", terminal=term)
    return f"{head}\n{table}"


# What a throwaway server for each protocol needs installed, and the option naming one instead.
_SERVER_EXTRAS = {
    "redis": ("redis", "--url redis://HOST:PORT/DB"),
    "sqs": ("sqs", "--endpoint-url"),
}


def _dev_server_config(
    backend: str, target: str | None
) -> tuple[dict[str, Any], str, Callable[[], None], Any]:
    """The bench's config for ``backend`` on the server ``target`` (or a throwaway one when it
    is None), a description, the cleanup, and the request counter (or None).

    The server comes from a ``blamequeue_register_dev_servers`` plugin (blamequeue-testing's),
    so core imports neither a backend nor the testing distribution here.
    """
    extra, option = _SERVER_EXTRAS[backend]
    if backend not in load_registry().protocols:
        raise UsageError(
            f"--backend {backend} needs the {backend} backend: pip install blamequeue[{extra}]"
        )
    registration = load_registry().dev_servers.get(backend)
    if registration is None:
        raise UsageError(
            f"--backend {backend} needs blamequeue-testing, which sets up the bench's server: "
            f"pip install 'blamequeue-testing[{extra}]'"
        )
    try:
        server = registration.value(target)
    except QueueError as exc:
        if target is not None:
            raise
        raise UsageError(f"{exc.message}; or pass {option}") from exc
    # Sealing is on by default for a user; the redis and sqs backends refuse to run without a key.
    seal = {"keys": {"bench": base64.b64encode(secrets.token_bytes(32)).decode("ascii")}}
    config = {**server.config, "seal": seal}
    return config, server.description, server.cleanup, getattr(server, "requests", None)


def run(args: argparse.Namespace) -> int:
    term = Terminal()
    temporary: Path | None = None
    cleanup: Callable[[], None] | None = None
    config: dict[str, Any]
    where = args.backend
    requests: Any = None
    if args.jobs is None:
        args.jobs = _SQS_JOBS if args.backend == "sqs" else _JOBS
    if args.url is not None and args.backend != "redis":
        raise UsageError("--url is for --backend redis")
    if args.endpoint_url is not None and args.backend != "sqs":
        raise UsageError("--endpoint-url is for --backend sqs")
    if args.processes and args.backend not in _CROSS_PROCESS:
        raise UsageError(f"--processes is for --backend local or redis, not {args.backend}")
    if args.backend == "sqs":
        if args.path is not None:
            raise UsageError("--path is for --backend local; use --endpoint-url for sqs")
        config, where, cleanup, requests = _dev_server_config("sqs", args.endpoint_url)
    elif args.backend == "redis":
        if args.path is not None:
            raise UsageError("--path is for --backend local; use --url for redis")
        config, where, cleanup, requests = _dev_server_config("redis", args.url)
    elif args.backend == "memory":
        if args.path is not None:
            raise UsageError("--path is for --backend local; the memory backend keeps no file")
        config = {"protocol": "memory"}
    else:
        path, temporary = new_database(args.path, "bench")
        config = {"protocol": "local", "path": str(path)}
        where = f"local ({path}{', temporary' if temporary else ''})"
    try:
        result = run_on_loop(
            functools.partial(_bench, args, config, progress_terminal(args.json), requests),
            args.loop,
        )
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        if cleanup is not None:
            cleanup()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        term.print(_report(result, where, term))
    return EXIT_OK
