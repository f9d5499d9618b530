"""The audit trail (SPEC §6): the events and their fields, sinks from plugins, the logging sink,
the hash-chained file and its verification, and progress markers that cannot flood."""

from __future__ import annotations

import json
import logging
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from blamequeue import AuditEvent, Job, JobContext, JsonlAuditSink, LoggingAuditSink, Queue
from blamequeue._audit import Auditor
from blamequeue._audit_file import GENESIS, verify_chain
from blamequeue._plugins import Registration, _collect, load_registry
from blamequeue.errors import BackendUnavailableError, ConfigError
from blamequeue_testing import MemoryBackend, VirtualClock

pytestmark = pytest.mark.anyio

SECRET = "payload-secret-a41c"


class Recorder:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[AuditEvent]:
        return [e for e in self.events if e.name == name]


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def queue(clock: VirtualClock, recorder: Recorder) -> AsyncIterator[Queue]:
    q = Queue(
        backends={"b": {"protocol": "memory"}},
        clock=clock,
        sweep_interval=0,
        audit_sinks=[recorder],
    )
    async with q:
        yield q


def event(n: int = 0, **data: Any) -> AuditEvent:
    from datetime import UTC, datetime

    return AuditEvent(
        name="system.queue.dlq.write",
        time=datetime(2025, 1, 1, 0, 0, n, tzinfo=UTC),
        backend="b",
        queue="q",
        job_id=f"job-{n}",
        trace_id=f"trace-{n}",
        classification="pci",
        data=data,
    )


# -- progress markers --------------------------------------------------------------------------
async def test_a_chatty_handler_gets_at_most_one_marker_per_second_plus_completion(
    queue: Queue, clock: VirtualClock, recorder: Recorder
) -> None:
    await queue.enqueue("q", {"card": SECRET}, trace_id="t", classification="pci")

    async def chatty(job: Job, ctx: JobContext) -> None:
        for step in range(10_000):  # 10 000 reports over 5 virtual seconds
            await ctx.progress(step / 100)
            clock.advance(0.0005)
        for _ in range(100):
            await ctx.progress(100)

    assert (await queue.tick("q", chatty)).succeeded == 1
    markers = recorder.named("system.queue.progress")
    percents = [m.data["percent"] for m in markers]
    assert len(markers) <= 5 + 1 + 1  # one per virtual second, the first, and the final 100 %
    assert percents[0] == 0
    assert percents[-1] == 100
    assert percents.count(100) == 1
    for marker in markers:
        assert (marker.queue, marker.trace_id, marker.classification) == ("q", "t", "pci")
        assert SECRET not in repr(marker)


async def test_progress_markers_are_kept_per_job(
    queue: Queue, clock: VirtualClock, recorder: Recorder
) -> None:
    ids = await queue.enqueue_many("q", ["a", "b"])

    async def report(job: Job, ctx: JobContext) -> None:
        await ctx.progress(10)
        await ctx.progress(20)

    await queue.tick("q", report, max=2, concurrency=2)
    markers = recorder.named("system.queue.progress")
    assert sorted(m.job_id for m in markers if m.job_id) == sorted(ids)


# -- events and their fields -------------------------------------------------------------------
async def test_a_dead_letter_from_an_unreadable_row_is_audited_with_its_error_code(
    queue: Queue, recorder: Recorder
) -> None:
    job_id = await queue.enqueue("q", {"card": SECRET}, trace_id="t", classification="pci")
    row = queue._runtimes["b"].backend._store.jobs[job_id]
    row.payload = row.payload[:-6] + "AAAAAA"
    result = await queue.tick("q", lambda job, ctx: None)
    assert result.moved_to_dlq == 1
    [written] = recorder.named("system.queue.dlq.write")
    assert (written.job_id, written.trace_id, written.classification) == (job_id, "t", "pci")
    assert written.data["error_type"] == "queue/unseal-failed"


async def test_each_expired_lease_is_its_own_event(
    queue: Queue, clock: VirtualClock, recorder: Recorder
) -> None:
    first = await queue.enqueue("q", "a", trace_id="t1", classification="c")
    second = await queue.enqueue("q", "b", trace_id="t2", classification="c", max_attempts=1)

    async def outlive(job: Job, ctx: JobContext) -> None:
        if job.id == first:
            clock.advance(31)
            await queue.sweep()

    await queue.tick("q", outlive, max=2, lease=30)
    expired = recorder.named("system.queue.lease.expired")
    assert {(e.job_id, e.trace_id, e.data["outcome"]) for e in expired} == {
        (first, "t1", "pending"),
        (second, "t2", "dead"),
    }
    assert all((e.backend, e.queue, e.classification) == ("b", "q", "c") for e in expired)
    [dead] = recorder.named("system.queue.dlq.write")
    assert dead.job_id == second


async def test_a_sweep_result_without_job_names_gives_one_counting_event(
    queue: Queue, clock: VirtualClock, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = queue._runtimes["b"].backend
    real_sweep = backend.sweep

    async def anonymous(**kwargs: Any) -> Any:
        import attrs

        return attrs.evolve(await real_sweep(**kwargs), expired=())

    monkeypatch.setattr(backend, "sweep", anonymous)
    await queue.enqueue_many("q", ["a", "b"])

    async def outlive(job: Job, ctx: JobContext) -> None:
        clock.advance(31)
        await queue.sweep()

    await queue.tick("q", outlive, max=2, lease=30)
    [aggregate] = recorder.named("system.queue.lease.expired")
    assert aggregate.job_id is None
    assert aggregate.data == {"repended": 2, "dead_lettered": 0}


class FlakyBackend(MemoryBackend):
    protocol = "flaky-memory"
    down = False

    async def size(self, queue: str) -> int:
        if FlakyBackend.down:
            raise BackendUnavailableError("the store is restarting")
        return await super().size(queue)


async def test_breaker_open_and_close_are_audited(
    clock: VirtualClock, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        load_registry().protocols,
        "flaky-memory",
        Registration(value=FlakyBackend, plugin="tests"),
    )
    config = {
        "protocol": "flaky-memory",
        "retry": {"attempts": 1, "base": 0, "cap": 0},
        "breaker": {"failure_threshold": 1, "reset_timeout": 30.0},
    }
    async with Queue(backends={"b": config}, clock=clock, audit_sinks=[recorder]) as q:
        monkeypatch.setattr(FlakyBackend, "down", True)
        with pytest.raises(BackendUnavailableError):
            await q.size("q")
        monkeypatch.setattr(FlakyBackend, "down", False)
        clock.advance(30)
        assert await q.size("q") == 0
    names = [e.name for e in recorder.events]
    assert names == ["system.queue.breaker.open", "system.queue.breaker.close"]
    assert all(e.backend == "b" and e.data == {"protocol": "flaky-memory"} for e in recorder.events)


# -- sinks -------------------------------------------------------------------------------------
async def test_a_sink_registered_through_the_hook_receives_events(
    clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blamequeue import hookimpl

    plugged = Recorder()

    @hookimpl
    def blamequeue_register_audit_sinks(register: Any) -> None:
        register("recorder", plugged)

    import pluggy

    from blamequeue import hookspecs

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(
        types.SimpleNamespace(blamequeue_register_audit_sinks=blamequeue_register_audit_sinks),
        name="audit-plugin",
    )
    registry = load_registry()
    found = _collect(manager, "blamequeue_register_audit_sinks", "audit sink")
    monkeypatch.setattr(registry, "audit_sinks", {**registry.audit_sinks, **found})

    async with Queue(backends={"b": {"protocol": "memory"}}, clock=clock) as q:
        await q.enqueue("q", "x")
        await q.purge("q")
    [purged] = plugged.events
    assert (purged.name, purged.backend, purged.queue) == ("system.queue.purge", "b", "q")


def test_a_plugin_registering_a_sink_class_instead_of_an_object_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = load_registry()
    monkeypatch.setattr(
        registry,
        "audit_sinks",
        {"oops": Registration(value=Recorder, plugin="careless")},
    )
    with pytest.raises(ConfigError) as info:
        Queue(backends={"b": {"protocol": "memory"}})
    assert "'careless'" in info.value.message
    assert "instance" in info.value.message


async def test_a_failing_sink_is_logged_and_the_others_still_get_the_event(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        async def emit(self, event: AuditEvent) -> None:
            raise OSError("disk full")

    good = Recorder()
    auditor = Auditor(clock=clock, sinks=[Broken(), good])
    with caplog.at_level(logging.ERROR, logger="blamequeue.audit"):
        await auditor.emit("system.queue.purge", backend="b", queue="q")
    assert [e.name for e in good.events] == ["system.queue.purge"]
    assert "failed on system.queue.purge" in caplog.text


async def test_the_logging_sink_logs_the_event_fields(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="blamequeue.audit"):
        await LoggingAuditSink().emit(event(1, attempts=3))
    [record] = caplog.records
    assert record.getMessage() == "system.queue.dlq.write"
    audit = record.audit  # type: ignore[attr-defined]
    assert audit["job_id"] == "job-1"
    assert audit["trace_id"] == "trace-1"
    assert audit["classification"] == "pci"
    assert audit["data"] == {"attempts": 3}


# -- the hash-chained file ---------------------------------------------------------------------
async def write(path: Path, count: int, start: int = 0) -> None:
    sink = JsonlAuditSink(path)
    for n in range(start, start + count):
        await sink.emit(event(n, seq=n))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


async def test_each_line_is_the_event_with_a_link_and_a_hash(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    records = [json.loads(line) for line in lines(path)]
    assert records[0]["prev"] == GENESIS
    assert records[1]["prev"] == records[0]["hash"]
    assert records[2]["prev"] == records[1]["hash"]
    first = records[0]
    assert {k: first[k] for k in ("name", "backend", "queue", "job_id", "trace_id")} == {
        "name": "system.queue.dlq.write",
        "backend": "b",
        "queue": "q",
        "job_id": "job-0",
        "trace_id": "trace-0",
    }
    assert first["classification"] == "pci"
    assert first["time"] == "2025-01-01T00:00:00+00:00"
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600
    report = verify_chain(path)
    assert (report.ok, report.events, report.last_hash) == (True, 3, records[2]["hash"])


async def test_a_new_sink_on_an_existing_file_continues_its_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 2)
    await write(path, 2, start=2)  # a restart: a new sink on the same file
    assert verify_chain(path).events == 4


async def test_concurrent_events_form_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(sink.emit, event(n % 60))
    report = verify_chain(path)
    assert (report.ok, report.events) == (True, 40)


async def test_values_json_cannot_hold_are_written_as_text(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await JsonlAuditSink(path).emit(event(0, odd={1, 2}))
    assert verify_chain(path).ok
    assert json.loads(lines(path)[0])["data"]["odd"] == "{1, 2}"


async def test_an_edited_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    content[1] = content[1].replace("job-1", "job-X")
    path.write_text("".join(content))
    report = verify_chain(path)
    assert (report.ok, report.bad_line, report.events) == (False, 2, 1)
    assert report.problem is not None
    assert "edited" in report.problem


async def test_a_removed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    del content[1]
    path.write_text("".join(content))
    report = verify_chain(path)
    assert report.bad_line == 2
    assert report.problem is not None
    assert "removed" in report.problem


async def test_a_removed_first_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    path.write_text("".join(lines(path)[1:]))
    assert verify_chain(path).bad_line == 1


async def test_reordered_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    content[1], content[2] = content[2], content[1]
    path.write_text("".join(content))
    assert verify_chain(path).bad_line == 2


async def test_an_inserted_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    content = lines(path)
    content.insert(2, content[0])  # a valid line, out of place
    path.write_text("".join(content))
    assert verify_chain(path).bad_line == 3


async def test_a_forged_line_with_its_own_valid_hash_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    content = lines(path)
    forged_file = tmp_path / "forged.jsonl"
    await JsonlAuditSink(forged_file).emit(event(9))  # hash fine, prev = genesis
    content.insert(1, lines(forged_file)[0])
    path.write_text("".join(content))
    assert verify_chain(path).bad_line == 2


async def test_a_line_cut_short_by_a_crash_is_named_and_appending_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 2)
    with path.open("a") as handle:
        handle.write('{"name": "system.queue.pur')
    await write(path, 1, start=5)
    report = verify_chain(path)
    assert (report.bad_line, report.events) == (3, 2)
    assert len(lines(path)) == 4


async def test_an_empty_file_verifies_with_no_events(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    report = verify_chain(path)
    assert (report.ok, report.events, report.last_hash) == (True, 0, GENESIS)


async def test_a_queue_writes_its_events_to_the_file_without_payloads(
    tmp_path: Path, clock: VirtualClock
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    async with Queue(backends={"b": {"protocol": "memory"}}, clock=clock, audit_sinks=[sink]) as q:
        job_id = await q.enqueue("q", {"card": SECRET}, max_attempts=1, trace_id="tr")

        async def fail(job: Job, ctx: JobContext) -> None:
            await ctx.progress(50)
            raise RuntimeError(f"declined {SECRET}")

        await q.tick("q", fail)
        await q.dlq_retry(job_id)
        await q.purge("q")
    text = path.read_text()
    assert SECRET not in text
    names = [json.loads(line)["name"] for line in lines(path)]
    assert names == [
        "system.queue.progress",
        "system.queue.dlq.write",
        "system.queue.dlq.retry",
        "system.queue.purge",
    ]
    assert verify_chain(path).ok
