"""SQLite faults: a full disk, a database locked by another process past the busy timeout, and a
process killed in the middle of a write transaction.  Each gives a clear ``QueueError``, leaves
the database intact (``PRAGMA integrity_check``) and loses nothing acknowledged (SPEC §5.1, §14).

The faults are real: SQLite itself returns SQLITE_FULL (``PRAGMA max_page_count`` on the
backend's own connection) or the kernel refuses a write (``RLIMIT_FSIZE`` in a child process);
another process holds ``BEGIN EXCLUSIVE``; a child is SIGKILLed while its ``enqueue_many`` runs.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from reliability_report import Form, Reports, ScenarioReport

from blamequeue import AuditEvent, Job, JobContext, Queue
from blamequeue.errors import QueueError
from blamequeue_local import connect
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("sqlite_fault_child.py")
QUEUE = "faults"
TABLE = "blamequeue_jobs"
SEAL = {"keys": {"k1": base64.b64encode(bytes(range(32))).decode("ascii")}}
PAD = {"pad": "x" * 500}
#: How long a test waits for something it expects before it fails: a hang guard, not a timing.
HANG_GUARD = 120.0


def child(*args: str) -> list[str]:
    return [sys.executable, str(CHILD), *args]


def integrity(db: Path) -> str:
    connection = sqlite3.connect(db)
    try:
        [(result,)] = connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        connection.close()
    return str(result)


async def drain(queue: Queue, ran: collections.Counter[str]) -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        ran[job.id] += 1

    while (await queue.tick(QUEUE, handler, max=500)).leased:
        pass


class AuditRecorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    async def emit(self, event: AuditEvent) -> None:
        self.names.append(event.name)


# -- a full disk ---------------------------------------------------------------------------------
async def test_a_full_database_refuses_enqueue_with_a_clear_error_and_recovers_losing_nothing(
    tmp_path: Path, anyio_backend: str, reliability_form: Form, reliability_reports: Reports
) -> None:
    db = tmp_path / "full.db"
    # The application's own connection, handed to the backend as its store, so the test can cap
    # that connection's database size: past the cap SQLite itself answers SQLITE_FULL.
    connection = connect(db)
    queue = Queue(
        backends={"local": {"protocol": "local", "store": connection}},
        seal=SEAL,
        sweep_interval=0,
    )
    ran: collections.Counter[str] = collections.Counter()
    try:
        async with queue:
            acked = await queue.enqueue_many(QUEUE, [PAD] * 100)
            [(pages,)] = connection.execute("PRAGMA page_count").fetchall()
            connection.execute(f"PRAGMA max_page_count = {pages}")
            refusal: QueueError | None = None
            for _ in range(100):
                try:
                    acked += await queue.enqueue_many(QUEUE, [PAD] * 100)
                except QueueError as exc:
                    refusal = exc
                    break
            assert refusal is not None, "the capped database never filled up"
            assert refusal.code == "queue/backend-unavailable"
            assert "disk is full" in refusal.message
            assert "free space" in refusal.message
            assert not refusal.retryable, "a full disk needs a person, not a retry loop"
            assert await queue.size(QUEUE) == len(acked), "nothing of the refused batch stored"
            assert [b.breaker_state for b in queue.list_backends()] == ["closed"]

            # Workers keep draining while new work is refused.
            while_full = await queue.tick(QUEUE, lambda job, ctx: ran.update([job.id]), max=50)

            freed = time.monotonic()
            connection.execute("PRAGMA max_page_count = 1073741823")
            acked += await queue.enqueue_many(QUEUE, [PAD] * 100)
            recovery = time.monotonic() - freed
            await drain(queue, ran)
            assert await queue.size(QUEUE) == 0
    finally:
        connection.close()

    lost = set(acked) - set(ran)
    reliability_reports.add(
        ScenarioReport(
            scenario="sqlite-disk-full (max_page_count)",
            backend=f"local/{anyio_backend}",
            form=reliability_form.name,
            enqueued=len(acked),
            completed=len(set(acked) & set(ran)),
            run_more_than_once=sum(1 for count in ran.values() if count > 1),
            lost=len(lost),
            recovery_seconds=recovery,
            details={
                "refused_batches": 1,
                "error": refusal.code,
                "drained_while_full": while_full.succeeded,
            },
        )
    )
    assert not lost
    assert set(ran) == set(acked)
    assert max(ran.values()) == 1
    assert integrity(db) == "ok"


def test_a_file_size_limit_refuses_enqueue_with_a_clear_error_and_recovers_losing_nothing(
    tmp_path: Path, reliability_form: Form, reliability_reports: Reports
) -> None:
    db = tmp_path / "fsize.db"
    # In a child: RLIMIT_FSIZE binds the whole process, pytest's own files included.
    done = subprocess.run(
        child("fsize", str(db), "200000"),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    error = result["error"]
    acked: list[str] = result["acked"]
    assert error is not None, "the file never hit its size limit"
    assert error["code"] == "queue/backend-unavailable"
    assert "disk" in error["message"]
    assert result["size_while_full"] == len(acked) - 100, "nothing of the refused batch stored"
    assert result["size_after"] == len(acked)
    assert integrity(db) == "ok"

    ran: collections.Counter[str] = collections.Counter()

    async def check() -> int:
        config = {"local": {"protocol": "local", "path": str(db)}}
        async with Queue(backends=config, sweep_interval=0) as queue:
            await drain(queue, ran)
            return await queue.size(QUEUE)

    assert anyio.run(check) == 0
    lost = set(acked) - set(ran)
    reliability_reports.add(
        ScenarioReport(
            scenario="sqlite-disk-full (RLIMIT_FSIZE)",
            backend="local",
            form=reliability_form.name,
            enqueued=len(acked),
            completed=len(set(acked) & set(ran)),
            run_more_than_once=sum(1 for count in ran.values() if count > 1),
            lost=len(lost),
            details={"error": error["code"], "retryable": error["retryable"]},
        )
    )
    assert not lost
    assert max(ran.values()) == 1


# -- a locked database ---------------------------------------------------------------------------
async def test_a_database_locked_by_another_process_opens_the_breaker_then_closes_after_release(
    tmp_path: Path, anyio_backend: str, reliability_form: Form, reliability_reports: Reports
) -> None:
    db = tmp_path / "locked.db"
    clock = VirtualClock(start=time.time())
    audit = AuditRecorder()
    reset_timeout = 10.0
    config = {
        "protocol": "local",
        "path": str(db),
        "busy_timeout": 0.2,
        "retry": {"attempts": 2, "base": 0.01, "cap": 0.05},
        "breaker": {"failure_threshold": 3, "reset_timeout": reset_timeout},
    }
    ran: collections.Counter[str] = collections.Counter()
    acked: list[str] = []
    ran_everything = anyio.Event()
    everything: set[str] | None = None  # set once the last enqueue is acknowledged

    async def handler(job: Job, ctx: JobContext) -> None:
        ran[job.id] += 1
        if everything is not None and everything <= ran.keys():
            ran_everything.set()

    queue = Queue(backends={"local": config}, sweep_interval=0, clock=clock, audit_sinks=[audit])
    async with queue:
        acked += await queue.enqueue_many(QUEUE, [{"n": n} for n in range(50)])
        locker = await anyio.open_process(child("lock", str(db)))
        try:
            assert locker.stdout is not None
            assert locker.stdin is not None
            with anyio.fail_after(HANG_GUARD):
                assert (await locker.stdout.receive()).strip() == b"locked"

            # A consumer starts while the file is locked: it backs off, it does not die.
            consumer = await queue.consume(QUEUE, handler, poll_interval=0.05)
            errors: list[QueueError] = []
            with anyio.fail_after(HANG_GUARD):
                while queue.list_backends()[0].breaker_state != "open":
                    try:
                        acked.append(await queue.enqueue(QUEUE, {"n": "during"}))
                    except QueueError as exc:
                        errors.append(exc)
            assert errors, "the lock was never noticed"
            for exc in errors:
                assert exc.code == "queue/backend-unavailable"
                assert exc.retryable
            assert any("busy" in exc.message for exc in errors)
            with pytest.raises(QueueError) as fast:
                await queue.enqueue(QUEUE, {"n": "breaker open"})
            assert "circuit breaker is open" in fast.value.message
            assert fast.value.retryable
            assert "system.queue.breaker.open" in audit.names
            # Still locked: after reset_timeout the breaker lets a call through (half-open);
            # that call fails and the breaker opens again.
            clock.advance(reset_timeout)
            assert queue.list_backends()[0].breaker_state == "half-open"
            with pytest.raises(QueueError) as probe:
                await queue.enqueue(QUEUE, {"n": "probe"})
            assert probe.value.retryable
            assert queue.list_backends()[0].breaker_state == "open"
            assert not consumer.stopped
        finally:
            await locker.stdin.aclose()  # the locker commits and exits
            with anyio.fail_after(HANG_GUARD):
                await locker.wait()
            await locker.aclose()
        released = time.monotonic()

        # A producer rides it out the way the error says: retry once the breaker lets calls
        # through.  (A call admitted before the breaker opened may finish after the release
        # and close it first, or a last busy answer may open it again: either way this ends.)
        after_release: list[QueueError] = []
        for _ in range(10):
            clock.advance(reset_timeout)
            try:
                acked += await queue.enqueue_many(QUEUE, [{"n": n} for n in range(50, 100)])
                break
            except QueueError as exc:
                after_release.append(exc)
        assert all(exc.retryable for exc in after_release)
        assert queue.list_backends()[0].breaker_state == "closed"
        breaker_events = [name for name in audit.names if ".breaker." in name]
        assert breaker_events[0] == "system.queue.breaker.open"
        assert breaker_events[-1] == "system.queue.breaker.close"
        everything = set(acked)
        if everything <= ran.keys():
            ran_everything.set()
        with anyio.fail_after(HANG_GUARD):
            await ran_everything.wait()
        recovery = time.monotonic() - released
        assert not consumer.stopped, "the consumer rode the lock out"
        consumer.cancel()
        await consumer.wait_stopped()
        assert await queue.size(QUEUE) == 0

    lost = set(acked) - set(ran)
    reliability_reports.add(
        ScenarioReport(
            scenario="sqlite-locked-past-busy-timeout",
            backend=f"local/{anyio_backend}",
            form=reliability_form.name,
            enqueued=len(acked),
            completed=len(set(acked) & set(ran)),
            run_more_than_once=sum(1 for count in ran.values() if count > 1),
            lost=len(lost),
            recovery_seconds=recovery,
            details={
                "refused_calls": len(errors) + 2 + len(after_release),
                "breaker": "open->half-open->closed",
                "consumer_lease_failures_survived": True,
            },
        )
    )
    assert not lost
    assert max(ran.values()) == 1
    assert integrity(db) == "ok"


# -- a process killed inside a write transaction --------------------------------------------------
def read_progress(path: Path) -> dict[str, dict[int, float]]:
    """``{"start": {batch: time}, "inside": {...}, "acked": {...}}`` from a child's progress."""
    seen: dict[str, dict[int, float]] = {"start": {}, "inside": {}, "acked": {}}
    if not path.exists():
        return seen
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] not in seen:
            continue  # a line the kill cut short
        seen[parts[0]][int(parts[1])] = float(parts[2])
    return seen


def test_a_process_killed_inside_enqueue_many_leaves_all_or_none_of_its_batch(
    tmp_path: Path, reliability_form: Form, reliability_reports: Reports
) -> None:
    db = tmp_path / "killed.db"
    rounds = reliability_form.pick(4, 12)
    # Both enqueue paths: a multi-row INSERT of bound values (<= 2048 jobs) and one JSON array.
    sizes = [2_000, 5_000]
    fractions = [0.3, 0.5, 0.7]
    first = 0
    kills_inside_transaction = 0
    kills_with_batch_in_flight = 0
    in_flight_committed = 0
    in_flight_rolled_back = 0
    acked_batches: set[int] = set()
    recoveries: list[float] = []
    expected: dict[int, int] = {}
    for round_number in range(rounds):
        size = sizes[round_number % len(sizes)]
        # "paused": killed at a known point, inside the open write transaction (rows written,
        # not committed).  "plain": the default store, killed part-way through a batch.
        how = ("paused", "plain")[(round_number // 2) % 2]
        progress = tmp_path / f"progress-{round_number}.txt"
        log_path = tmp_path / f"child-{round_number}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                child("batches", str(db), str(progress), str(first), str(size), how),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + HANG_GUARD
            while True:
                seen = read_progress(progress)
                if how == "paused" and first in seen["inside"]:
                    break
                if how == "plain" and first in seen["acked"] and first + 1 in seen["start"]:
                    # One whole batch timed; kill part-way through the next one.
                    duration = seen["acked"][first] - seen["start"][first]
                    fraction = fractions[round_number % len(fractions)]
                    target = seen["start"][first + 1] + fraction * duration
                    time.sleep(max(0.0, target - time.time()))
                    break
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "hang guard: the child enqueued nothing"
                time.sleep(0.002)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()

        seen = read_progress(progress)
        acked = set(seen["acked"])
        for number in acked:
            expected[number] = size
        acked_batches.update(acked)
        in_flight = sorted(set(seen["start"]) - acked)
        assert len(in_flight) <= 1
        if how == "paused":
            assert in_flight == [first], "killed with the transaction open"
            kills_inside_transaction += 1

        reopened = time.monotonic()
        connection = sqlite3.connect(db)
        try:
            [(check,)] = connection.execute("PRAGMA integrity_check").fetchall()
            stored = dict(
                connection.execute(
                    f"SELECT json_extract(payload, '$.batch'), COUNT(*) FROM {TABLE} GROUP BY 1"
                ).fetchall()
            )
        finally:
            connection.close()
        recoveries.append(time.monotonic() - reopened)
        assert check == "ok"
        for number in in_flight:
            kills_with_batch_in_flight += 1
            count = stored.get(number, 0)
            assert count in (0, size), f"batch {number}: {count} of {size} jobs stored"
            if count:
                in_flight_committed += 1  # committed, killed before the caller heard of it
                expected[number] = size
            else:
                in_flight_rolled_back += 1
        assert stored == expected, "every acknowledged batch whole, nothing else stored"
        first = max(seen["start"]) + 1

    sizes_of = dict(expected)
    ran: collections.Counter[tuple[int, int]] = collections.Counter()

    async def reopen_and_drain() -> tuple[int, int]:
        config = {"local": {"protocol": "local", "path": str(db), "seal": False}}
        async with Queue(backends=config, sweep_interval=0) as queue:
            before = await queue.size(QUEUE)

            async def handler(job: Job, ctx: JobContext) -> None:
                ran[(job.payload["batch"], job.payload["i"])] += 1

            while (await queue.tick(QUEUE, handler, max=1000)).leased:
                pass
            return before, await queue.size(QUEUE)

    before, after = anyio.run(reopen_and_drain)
    acked_keys = {(b, i) for b, n in sizes_of.items() if b in acked_batches for i in range(n)}
    lost = acked_keys - set(ran)
    reliability_reports.add(
        ScenarioReport(
            scenario="sqlite-killed-inside-enqueue_many",
            backend="local",
            form=reliability_form.name,
            enqueued=len(acked_keys),
            completed=len(acked_keys & set(ran)),
            run_more_than_once=sum(1 for count in ran.values() if count > 1),
            lost=len(lost),
            recovery_seconds=max(recoveries),
            details={
                "kills": rounds,
                "kills_inside_open_transaction": kills_inside_transaction,
                "kills_with_a_batch_in_flight": kills_with_batch_in_flight,
                "in_flight_batch_committed": in_flight_committed,
                "in_flight_batch_rolled_back": in_flight_rolled_back,
            },
        )
    )
    assert before == sum(sizes_of.values()), "the queue opens after the kills and sees every job"
    assert after == 0
    assert not lost
    assert set(ran) == {(b, i) for b, n in sizes_of.items() for i in range(n)}
    assert max(ran.values()) == 1
    assert kills_inside_transaction == sum(1 for r in range(rounds) if (r // 2) % 2 == 0)
