"""Soak: a big backlog drained by one worker process, whose memory and lease latency stay flat.

The test fills the queue first (1,000,000 jobs in the long form), then starts one worker
process (``soak_worker.py``, so the RSS sampled is the worker's alone) and watches it drain the
backlog down to nothing: the worker's ``VmRSS`` from ``/proc`` every 0.2 s, the duration of
every lease call it makes (timed inside the worker, filed by the backlog the call met), and on
Redis the server's ``used_memory`` and retained done jobs, with a short ``retain_done`` so the
worker's sweep prunes them as it goes.  Afterwards every job enqueued must have run exactly once
and nothing may be left in the queue or its DLQ.

The flatness bounds are deliberately loose (a leak or a lease that scans the backlog blows them
by far; a busy machine does not): the figures themselves go in the report.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import redis
from reliability_report import Form, Reports, ScenarioReport

from blamequeue import Queue
from blamequeue_redis._keys import KeyLayout
from blamequeue_testing.servers import RedisServer

WORKER = Path(__file__).with_name("soak_worker.py")
QUEUE = "soak"
FILL_BATCH = 10_000
CONCURRENCY = 50  # what `blamequeue bench` uses
SWEEP_INTERVAL = 1.0  # the worker's: prunes done jobs past retain_done as it goes
REDIS_RETAIN_DONE = 5.0
SAMPLE = 0.2  # seconds between RSS / used_memory samples
PROGRESS_LAG = 1.5  # the worker writes its progress every second
MIB = 1024 * 1024

# After warm-up (the first tenth of the backlog) a worker's RSS may still move by allocator
# noise, never by a cost per job: 1 KiB leaked per job is 20 MiB over the bounded form's
# 20,000 jobs and 1 GiB over the long form's million.
RSS_GROWTH_MAX_MIB = 16.0
# A lease at the full backlog may be slower than at 1,000 jobs by noise, not by the backlog.
# The slack is wide (a machine with 7 runnable processes per core saw 6 ms medians): a lease
# that walked the backlog would cost tens of milliseconds per 100,000 jobs, so the long form
# still catches one, and the bounded form never fails on a busy machine.
LEASE_SLOWER_MAX = 5.0
LEASE_SLACK_S = 0.020
# After the drain and one retain_done, Redis holds what it held before the fill, plus its
# own bookkeeping (dict tables shrink lazily): never the million jobs (hundreds of MiB).
REDIS_LEFT_MAX_MIB = 32.0
# Done jobs may outlive retain_done by a late sweep on a busy machine, never by much: the
# retained ones are at most those finished within retain_done plus this.
RETENTION_SLACK_S = 30.0


@attrs.define
class Sample:
    """One look at the run: seconds since the worker started, jobs it had finished, its RSS."""

    at: float
    succeeded: int
    rss_kib: int
    used_memory: int | None = None
    done_retained: int | None = None


@attrs.define
class Run:
    """What one soak measured."""

    samples: list[Sample] = attrs.field(factory=list)
    progress: list[dict[str, Any]] = attrs.field(factory=list)
    windows: dict[str, list[tuple[float, int]]] = attrs.field(factory=dict)
    drain_s: float = 0.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def seal_config() -> dict[str, Any]:
    return {"keys": {"soak": base64.b64encode(secrets.token_bytes(32)).decode("ascii")}}


@pytest.fixture
def backend_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    protocol = request.param
    if protocol == "local":
        yield {"protocol": "local", "path": str(tmp_path / "soak.db")}
        return
    server = RedisServer()
    server.start()
    try:
        yield {
            "protocol": "redis",
            "url": server.url,
            "seal": seal_config(),
            "retain_done": REDIS_RETAIN_DONE,
        }
    finally:
        server.cleanup()


async def fill(config: dict[str, Any], jobs: int) -> list[str]:
    ids: list[str] = []
    async with Queue(backends={"soak": config}, sweep_interval=0) as q:
        for start in range(0, jobs, FILL_BATCH):
            batch = [{"n": n} for n in range(start, min(start + FILL_BATCH, jobs))]
            ids += await q.enqueue_many(QUEUE, batch)
    return ids


async def leftovers(config: dict[str, Any]) -> tuple[int, int]:
    async with Queue(backends={"soak": config}, sweep_interval=0) as q:
        return await q.size(QUEUE), await q.dlq_size(QUEUE)


class RedisWatch:
    """The server's ``used_memory`` and the queue's retained done jobs."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.done_key = KeyLayout("blamequeue:queue").queue(QUEUE).base + "done"

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def done_retained(self) -> int:
        return int(self.client.zcard(self.done_key))

    def close(self) -> None:
        self.client.close()


def drain(
    config: dict[str, Any], jobs: int, event_loop: str, folder: Path, hang_guard: float
) -> Run:
    """Start the worker, sample it until the backlog is done (and, on Redis, pruned), stop it."""
    ledger = folder / "ledger.txt"
    progress_path = folder / "progress.jsonl"
    progress_path.touch()
    watch = RedisWatch(config["url"]) if config["protocol"] == "redis" else None
    run = Run()
    args = [
        sys.executable,
        str(WORKER),
        json.dumps(config),
        QUEUE,
        str(jobs),
        str(ledger),
        str(progress_path),
        event_loop,
        str(CONCURRENCY),
        str(SWEEP_INTERVAL),
    ]
    log_path = folder / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        with progress_path.open(encoding="utf-8") as progress:
            succeeded = 0
            while True:
                for line in progress.readlines():
                    record = json.loads(line)
                    run.progress.append(record)
                    succeeded = record["succeeded"]
                now = time.monotonic()
                assert worker.poll() is None, (
                    f"the worker exited with {worker.returncode}:\n"
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
                sample = Sample(at=now - started, succeeded=succeeded, rss_kib=rss_kib(worker.pid))
                if watch is not None:
                    sample.used_memory = watch.used_memory()
                    sample.done_retained = watch.done_retained()
                run.samples.append(sample)
                if succeeded >= jobs and not run.drain_s:
                    run.drain_s = now - started
                if succeeded >= jobs and not sample.done_retained:
                    break
                assert now - started < hang_guard, (
                    f"hang guard: {succeeded}/{jobs} done after {now - started:.0f} s\n"
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
                time.sleep(SAMPLE)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0, log_path.read_text(errors="replace")[-3000:]
            for line in progress.readlines():
                run.progress.append(json.loads(line))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if watch is not None:
            watch.close()
    for record in run.progress:
        for key, value in record.items():
            if key.startswith("window_"):
                run.windows[key.removeprefix("window_")] = [tuple(pair) for pair in value]
    return run


def at_fraction(samples: list[Sample], jobs: int, fraction: float) -> Sample:
    """The first sample taken once ``fraction`` of the jobs were done."""
    return next(s for s in samples if s.succeeded >= fraction * jobs)


def finished_within(samples: list[Sample], sample: Sample, seconds: float) -> int:
    """At least the jobs the worker finished in the ``seconds`` up to ``sample``.  A sample's
    count is the worker's last progress line, at most a second old, so the count ``sample``
    ends with is read from a sample taken ``PROGRESS_LAG`` later."""
    later = next((s for s in samples if s.at >= sample.at + PROGRESS_LAG), samples[-1])
    before = [s for s in samples if s.at <= sample.at - seconds]
    return later.succeeded - (before[-1].succeeded if before else 0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def lease_figures(windows: dict[str, list[tuple[float, int]]]) -> dict[str, dict[str, float]]:
    """Per backlog window: median and p99 of a lease call, jobs per call, seconds per job."""
    figures: dict[str, dict[str, float]] = {
        "lease_p50_ms": {},
        "lease_p99_ms": {},
        "lease_us_per_job": {},
        "lease_jobs_per_call": {},
    }
    for name, calls in windows.items():
        seconds = [took for took, _jobs in calls]
        leased = sum(jobs for _took, jobs in calls)
        figures["lease_p50_ms"][name] = percentile(seconds, 0.5) * 1000
        figures["lease_p99_ms"][name] = percentile(seconds, 0.99) * 1000
        figures["lease_us_per_job"][name] = sum(seconds) / leased * 1e6
        figures["lease_jobs_per_call"][name] = leased / len(calls)
    return figures


def lease_by_quarter(progress: list[dict[str, Any]], jobs: int) -> dict[str, float]:
    """The mean lease call (ms) over each quarter of the drain, by the backlog left at its end:
    every call of the run, not just the windows'."""
    quarters: dict[str, list[float]] = {}
    for record in progress:
        if record["lease_jobs"]:
            left = record["backlog"]
            quarter = min(3, 4 * (jobs - left) // jobs)
            name = f"q{quarter + 1}"
            totals = quarters.setdefault(name, [0.0, 0])
            totals[0] += record["lease_s"]
            totals[1] += record["lease_calls"]
    return {name: seconds / calls * 1000 for name, (seconds, calls) in sorted(quarters.items())}


@pytest.mark.parametrize("event_loop", ["asyncio", "trio"])
@pytest.mark.parametrize("backend_config", ["local", "redis"], indirect=True)
def test_a_worker_drains_a_big_backlog_with_flat_memory_and_lease_latency(
    backend_config: dict[str, Any],
    event_loop: str,
    tmp_path: Path,
    reliability_form: Form,
    reliability_reports: Reports,
) -> None:
    jobs = reliability_form.pick(20_000, 1_000_000)
    hang_guard = reliability_form.pick(300.0, 7200.0)  # a hang fails; it is not a speed check
    protocol = backend_config["protocol"]
    watch = RedisWatch(backend_config["url"]) if protocol == "redis" else None
    baseline = watch.used_memory() if watch is not None else None

    load_before = os.getloadavg()[0]
    filled_at = time.monotonic()
    ids = anyio.run(fill, backend_config, jobs, backend=event_loop)
    fill_s = time.monotonic() - filled_at
    enqueued = set(ids)
    assert len(enqueued) == jobs
    after_fill = watch.used_memory() if watch is not None else None
    if watch is not None:
        watch.close()

    run = drain(backend_config, jobs, event_loop, tmp_path, hang_guard)

    per_job = collections.Counter((tmp_path / "ledger.txt").read_text().split())
    ran_twice = [job_id for job_id, count in per_job.items() if count > 1]
    strangers = set(per_job) - enqueued
    lost = enqueued - set(per_job)
    size, dead = anyio.run(leftovers, backend_config, backend=event_loop)
    states: dict[str, int] | None = None
    if protocol == "local":
        with sqlite3.connect(backend_config["path"]) as db:
            states = dict(db.execute("SELECT state, COUNT(*) FROM blamequeue_jobs GROUP BY state"))
    last = run.progress[-1]

    samples = run.samples
    warm = at_fraction(samples, jobs, 0.1)
    end = samples[-1]
    first = next(s for s in samples if s.succeeded > 0)
    rss_mib = {"rss_first_mib": first.rss_kib / 1024} | {
        f"rss_{round(f * 100)}pct_mib": at_fraction(samples, jobs, f).rss_kib / 1024
        for f in (0.1, 0.25, 0.5, 0.75, 1.0)
    }
    lease = lease_figures(run.windows)
    full_p50, small_p50 = lease["lease_p50_ms"]["full"], lease["lease_p50_ms"]["1k"]
    overdue: list[Sample] = []
    details: dict[str, Any] = {
        "event_loop": event_loop,
        "fill_s": fill_s,
        "drain_s": run.drain_s,
        "jobs_per_s": jobs / run.drain_s,
        **rss_mib,
        "rss_end_mib": end.rss_kib / 1024,
        "rss_max_mib": max(s.rss_kib for s in samples) / 1024,
        **lease,
        "lease_mean_ms_by_quarter": lease_by_quarter(run.progress, jobs),
        # The machine is shared: how busy it was says how much the times mean.
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        "stale": last["stale"],
        "failed": last["failed"],
    }
    if protocol == "local":
        details["db_mib"] = os.path.getsize(backend_config["path"]) / MIB
        details["states"] = states
    else:
        assert baseline is not None
        assert after_fill is not None
        details["redis_baseline_mib"] = baseline / MIB
        details["redis_after_fill_mib"] = after_fill / MIB
        details["redis_peak_mib"] = max(s.used_memory or 0 for s in samples) / MIB
        for f in (0.25, 0.5, 0.75, 1.0):
            details[f"redis_{round(f * 100)}pct_mib"] = (
                at_fraction(samples, jobs, f).used_memory or 0
            ) / MIB
        details["redis_end_mib"] = (end.used_memory or 0) / MIB
        details["done_retained_max"] = max(s.done_retained or 0 for s in samples)
        # What retain_done lets Redis hold: the jobs finished in the last retain_done, plus
        # a sweep interval.
        retention = REDIS_RETAIN_DONE + SWEEP_INTERVAL
        details["done_retained_over_window_max"] = max(
            (s.done_retained or 0) / max(1, finished_within(samples, s, retention)) for s in samples
        )
        overdue = [
            s
            for s in samples
            if (s.done_retained or 0) > finished_within(samples, s, retention + RETENTION_SLACK_S)
        ]
    reliability_reports.add(
        ScenarioReport(
            scenario="soak",
            backend=f"{protocol}/{event_loop}",
            form=reliability_form.name,
            enqueued=jobs,
            completed=len(enqueued & set(per_job)),
            run_more_than_once=len(ran_twice),
            lost=len(lost),
            details=details,
        )
    )

    assert not strangers, f"{len(strangers)} jobs ran that nobody enqueued"
    assert not lost, f"{len(lost)} acknowledged jobs never ran"
    assert not ran_twice, f"{len(ran_twice)} jobs ran twice without any fault: {ran_twice[:5]}"
    assert (last["failed"], last["stale"]) == (0, 0)
    assert (size, dead) == (0, 0)
    if states is not None:
        assert states == {"done": jobs}  # retain_done is the default hour: every row kept
    growth = (end.rss_kib - warm.rss_kib) / 1024
    assert growth < RSS_GROWTH_MAX_MIB, (
        f"worker RSS grew {growth:.1f} MiB after warm-up over {jobs} jobs: {rss_mib}"
    )
    assert full_p50 / 1000 < LEASE_SLOWER_MAX * small_p50 / 1000 + LEASE_SLACK_S, (
        f"a lease call at {jobs} jobs pending is much slower than at 1,000: {lease}"
    )
    if protocol == "redis":
        assert not overdue, (
            f"Redis kept done jobs far past retain_done: {overdue[0]} (retain_done "
            f"{REDIS_RETAIN_DONE} s, sweep every {SWEEP_INTERVAL} s)"
        )
        assert baseline is not None
        left = ((end.used_memory or 0) - baseline) / MIB
        assert left < REDIS_LEFT_MAX_MIB, (
            f"Redis holds {left:.1f} MiB more than before the fill once every done job is "
            f"past retain_done"
        )
