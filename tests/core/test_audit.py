"""The audit trail (SPEC §6): the events and their fields, sinks from plugins, the logging sink,
the keyed chained file and its verification, and progress markers that cannot flood."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import signal
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from blamequeue import AuditEvent, Job, JobContext, JsonlAuditSink, LoggingAuditSink, Queue
from blamequeue._audit import Auditor, error_type
from blamequeue._audit_file import GENESIS, RECOVERY_EVENT, audit_key, verify_chain
from blamequeue._plugins import Registration, _collect, load_registry
from blamequeue._sealing import _read_key_file
from blamequeue.errors import BackendUnavailableError, ConfigError, QueueError
from blamequeue_testing import MemoryBackend, VirtualClock
from blamequeue_testing.conformance import AuditRecorder

pytestmark = pytest.mark.anyio

SECRET = "payload-secret-a41c"
K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(32, 64))).decode()
KEYS = f"k1:{K1}"
KEYRING = {"k1": bytes(range(32)), "k2": bytes(range(32, 64))}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def recorder() -> AuditRecorder:
    return AuditRecorder()


@pytest.fixture
async def queue(clock: VirtualClock, recorder: AuditRecorder) -> AsyncIterator[Queue]:
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
    queue: Queue, clock: VirtualClock, recorder: AuditRecorder
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
    queue: Queue, clock: VirtualClock, recorder: AuditRecorder
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
    queue: Queue, recorder: AuditRecorder
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
    queue: Queue, clock: VirtualClock, recorder: AuditRecorder
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
    queue: Queue, clock: VirtualClock, recorder: AuditRecorder, monkeypatch: pytest.MonkeyPatch
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
    clock: VirtualClock, recorder: AuditRecorder, monkeypatch: pytest.MonkeyPatch
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

    plugged = AuditRecorder()

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
        {"oops": Registration(value=AuditRecorder, plugin="careless")},
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

    good = AuditRecorder()
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


# -- the keyed, chained file ----------------------------------------------------------------
async def write(path: Path, count: int, start: int = 0, keys: str = KEYS) -> JsonlAuditSink:
    sink = JsonlAuditSink(path, keys=keys)
    for n in range(start, start + count):
        await sink.emit(event(n, seq=n))
    return sink


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def put(path: Path, content: list[bytes]) -> None:
    path.write_bytes(b"".join(content))


def relink(content: list[bytes], key: bytes, start: int = 0) -> list[bytes]:
    """What someone who can write the file but lacks the key does: recompute every link from
    line ``start`` on, with a key of their own under the same key id."""
    out = content[:start]
    prev = json.loads(out[-1])["mac"] if out else GENESIS
    for raw in content[start:]:
        record = json.loads(raw)
        record.pop("mac")
        record["prev"] = prev
        body = json.dumps(record, separators=(",", ":"))[:-1].encode()
        prev = hmac.new(key, body, hashlib.sha256).hexdigest()
        out.append(body + b',"mac":"' + prev.encode() + b'"}\n')
    return out


async def test_each_line_is_the_event_with_its_number_key_id_link_and_mac(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = await write(path, 3)
    records = [json.loads(line) for line in lines(path)]
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert {r["kid"] for r in records} == {"k1"}
    assert records[0]["prev"] == GENESIS
    assert records[1]["prev"] == records[0]["mac"]
    assert records[2]["prev"] == records[1]["mac"]
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
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events, report.last_hash) == (True, 3, records[2]["mac"])
    assert sink.head is not None
    assert (sink.head.count, sink.head.hash) == (3, records[2]["mac"])


async def test_the_mac_covers_the_line_bytes_under_a_key_derived_from_the_seal_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 1)
    [raw] = lines(path)
    body, _, _ = raw.partition(b',"mac":"')
    mac = json.loads(raw)["mac"]
    derived = audit_key(KEYRING["k1"])
    assert derived != KEYRING["k1"]
    assert hmac.new(derived, body, hashlib.sha256).hexdigest() == mac
    assert hmac.new(KEYRING["k1"], body, hashlib.sha256).hexdigest() != mac


async def test_a_new_sink_on_an_existing_file_continues_its_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 2)
    await write(path, 2, start=2)  # a restart: a new sink on the same file
    assert verify_chain(path, KEYRING).events == 4


async def test_concurrent_events_form_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path, keys=KEYS)
    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(sink.emit, event(n % 60))
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events) == (True, 40)


async def test_values_json_cannot_hold_are_written_as_text(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await JsonlAuditSink(path, keys=KEYS).emit(event(0, odd={1, 2}))
    assert verify_chain(path, KEYRING).ok
    assert json.loads(lines(path)[0])["data"]["odd"] == "{1, 2}"


async def test_a_rotated_key_keeps_one_chain_that_verifies_with_the_keyring(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 2)
    await write(path, 2, start=2, keys=f"k2:{K2},k1:{K1}")  # the new key writes first
    assert [json.loads(line)["kid"] for line in lines(path)] == ["k1", "k1", "k2", "k2"]
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events, report.key_ids) == (True, 4, ("k1", "k2"))
    partial = verify_chain(path, {"k2": KEYRING["k2"]})
    assert (partial.bad_line, partial.problem is not None) == (1, True)
    assert "'k1'" in str(partial.problem)


async def test_a_line_rewritten_and_every_link_recomputed_without_the_key_fails(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    content[1] = content[1].replace(b"job-1", b"job-X")
    put(path, relink(content, audit_key(os.urandom(32)), start=1))
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.bad_line, report.events) == (False, 2, 1)
    assert "MAC" in str(report.problem)


async def test_recomputing_with_the_real_key_is_what_it_takes(tmp_path: Path) -> None:
    """The forger's tool works (so the test above fails for the key, not for the tool)."""
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    content = lines(path)
    content[1] = content[1].replace(b"job-1", b"job-X")
    put(path, relink(content, audit_key(KEYRING["k1"]), start=1))
    assert verify_chain(path, KEYRING).ok


@pytest.mark.parametrize(
    ("original", "altered"),
    [
        (b'"job_id":"job-1"', b'"job_id":"job-9","job_id":"job-1"'),  # parses the same
        (b'"name":"system', b'"name": "system'),  # spacing
        (b'"queue":"q","job_id":"job-1"', b'"job_id":"job-1","queue":"q"'),  # key order
    ],
    ids=["duplicate-key", "whitespace", "key-order"],
)
async def test_a_line_that_parses_the_same_but_differs_fails(
    tmp_path: Path, original: bytes, altered: bytes
) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    content = lines(path)
    assert original in content[1]
    content[1] = content[1].replace(original, altered)
    put(path, content)
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.bad_line) == (False, 2)


async def test_a_removed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    del content[1]
    put(path, content)
    report = verify_chain(path, KEYRING)
    assert report.bad_line == 2
    assert "removed" in str(report.problem)


async def test_a_removed_first_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    put(path, lines(path)[1:])
    assert verify_chain(path, KEYRING).bad_line == 1


async def test_reordered_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 4)
    content = lines(path)
    content[1], content[2] = content[2], content[1]
    put(path, content)
    assert verify_chain(path, KEYRING).bad_line == 2


async def test_an_inserted_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(path, 3)
    content = lines(path)
    content.insert(2, content[0])  # a valid line, out of place
    put(path, content)
    assert verify_chain(path, KEYRING).bad_line == 3


async def test_lines_cut_off_the_end_are_caught_by_a_head_recorded_elsewhere(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = await write(path, 5)
    assert sink.head is not None
    recorded = sink.head
    put(path, lines(path)[:3])
    report = verify_chain(path, KEYRING)
    assert report.ok  # a shorter chain holds by itself...
    assert "fewer than the 5" in str(report.holds(recorded.count, None))
    assert "not in the chain" in str(report.holds(None, recorded.hash))
    assert report.holds(recorded.count, recorded.hash) is not None
    # ...and a head recorded earlier, further down a longer chain, is found in it.
    await write(path, 3, start=10)
    assert verify_chain(path, KEYRING).holds(recorded.count, None) is None
    earlier = json.loads(lines(path)[1])["mac"]
    assert verify_chain(path, KEYRING).holds(2, earlier) is None


async def test_an_empty_file_verifies_with_no_events(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events, report.last_hash) == (True, 0, GENESIS)


# -- a crash mid-write -------------------------------------------------------------------------
WRITER = Path(__file__).with_name("audit_writer.py")


async def test_a_writer_killed_mid_line_is_recovered_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    command = [sys.executable, str(WRITER), str(path), KEYS, "5"]
    async with await anyio.open_process(command, stderr=None) as process:
        assert process.stdout is not None
        said = b""
        while not said.endswith(b"torn\n"):
            said += await process.stdout.receive()
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
    torn = path.read_bytes().rsplit(b"\n", 1)[1]
    assert torn.startswith(b'{"v":2,"seq":6')
    assert not verify_chain(path, KEYRING).ok  # before anything is appended

    await JsonlAuditSink(path, keys=KEYS).emit(event(42))

    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events) == (True, 7)
    [recovery] = report.recoveries
    assert (recovery.line, recovery.torn_bytes) == (6, len(torn))
    record = json.loads(lines(path)[5])
    assert record["name"] == RECOVERY_EVENT
    assert base64.b64decode(record["data"]["torn"]) == torn
    assert json.loads(lines(path)[6])["job_id"] == "job-42"


# -- files on disk -----------------------------------------------------------------------------
async def test_the_file_is_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    old = os.umask(0)
    try:
        await write(path, 1)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


async def test_a_symlink_at_the_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)
    with pytest.raises(ConfigError) as info:
        await JsonlAuditSink(link, keys=KEYS).emit(event(0))
    assert info.value.code == "queue/invalid-config"
    assert "symbolic link" in info.value.message
    assert target.read_text() == ""


async def test_a_queue_with_a_symlinked_audit_file_does_not_start(tmp_path: Path) -> None:
    link = tmp_path / "audit.jsonl"
    link.symlink_to(tmp_path / "elsewhere.jsonl")
    queue = Queue(
        backends={"b": {"protocol": "memory"}}, audit_sinks=[JsonlAuditSink(link, keys=KEYS)]
    )
    with pytest.raises(ConfigError, match="symbolic link"):
        await queue.start()
    assert not (tmp_path / "elsewhere.jsonl").exists()


# -- where the key comes from ------------------------------------------------------------------
async def test_a_local_queue_keys_the_chain_with_its_seal_key_file(
    tmp_path: Path, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)
    path, db = tmp_path / "audit.jsonl", tmp_path / "jobs.db"
    sink = JsonlAuditSink(path)
    async with Queue(
        backends={"b": {"protocol": "local", "path": str(db)}},
        clock=clock,
        audit_sinks=[sink],
    ) as q:
        await q.enqueue("q", "x")
        await q.purge("q")
    keys = _read_key_file(f"{db}.key")
    assert json.loads(lines(path)[0])["kid"] == next(iter(keys))
    assert verify_chain(path, keys).ok
    assert not (tmp_path / "audit.jsonl.key").exists()


async def test_queue_seal_keys_key_the_chain(tmp_path: Path, clock: VirtualClock) -> None:
    path = tmp_path / "audit.jsonl"
    async with Queue(
        backends={"b": {"protocol": "memory"}},
        seal={"keys": {"k2": K2}},
        clock=clock,
        audit_sinks=[JsonlAuditSink(path)],
    ) as q:
        await q.purge("q")
    assert json.loads(lines(path)[0])["kid"] == "k2"
    assert verify_chain(path, KEYRING).ok


async def test_blamequeue_seal_keys_key_a_sink_used_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", f"k2:{K2}")
    path = tmp_path / "audit.jsonl"
    await JsonlAuditSink(path).emit(event(0))
    assert json.loads(lines(path)[0])["kid"] == "k2"
    assert verify_chain(path, KEYRING).ok


async def test_without_a_durable_key_the_sink_makes_its_own_key_file(
    tmp_path: Path, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)
    path = tmp_path / "audit.jsonl"
    # memory seals with a key of this process only: nobody could verify with it later.
    async with Queue(
        backends={"b": {"protocol": "memory"}}, clock=clock, audit_sinks=[JsonlAuditSink(path)]
    ) as q:
        await q.purge("q")
    key_file = tmp_path / "audit.jsonl.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert verify_chain(path, _read_key_file(str(key_file))).ok


async def test_a_sink_that_cannot_make_its_key_file_refuses_to_start_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)
    sink = JsonlAuditSink(tmp_path / "audit.jsonl", key_file=tmp_path / "missing" / "a.key")
    queue = Queue(backends={"b": {"protocol": "memory"}}, audit_sinks=[sink])
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.code == "queue/invalid-config"
    assert "BLAMEQUEUE_SEAL_KEYS" in info.value.message


# -- files written before the chain was keyed --------------------------------------------------
def older_lines(count: int) -> list[bytes]:
    """Lines as the unkeyed version wrote them: SHA-256 of the canonical JSON without hash."""
    out, prev = [], GENESIS
    for n in range(count):
        record = {**event(n).to_dict(), "prev": prev}
        canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
        prev = record["hash"] = hashlib.sha256(canonical.encode()).hexdigest()
        out.append((json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode())
    return out


async def test_a_file_of_the_older_unkeyed_format_is_reported_not_crashed_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    put(path, older_lines(3))
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events, report.unkeyed, report.covered) == (True, 3, 3, False)


async def test_keyed_lines_appended_to_an_older_file_cover_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    put(path, older_lines(3))
    await write(path, 2, start=3)
    assert [json.loads(line)["seq"] for line in lines(path)[3:]] == [4, 5]
    report = verify_chain(path, KEYRING)
    assert (report.ok, report.events, report.unkeyed, report.covered) == (True, 5, 3, True)
    content = lines(path)
    content[0] = content[0].replace(b"job-0", b"job-X")
    put(path, content)
    assert verify_chain(path, KEYRING).bad_line == 1


# -- what events carry -------------------------------------------------------------------------
async def test_a_queue_writes_its_events_to_the_file_without_payloads_progress_or_errors(
    tmp_path: Path, clock: VirtualClock
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path, keys=KEYS)
    async with Queue(backends={"b": {"protocol": "memory"}}, clock=clock, audit_sinks=[sink]) as q:
        job_id = await q.enqueue("q", {"card": SECRET}, max_attempts=1, trace_id="tr")

        async def fail(job: Job, ctx: JobContext) -> None:
            await ctx.progress(50, {"step": SECRET, "of": 3})
            raise RuntimeError(f"declined {SECRET}")

        await q.tick("q", fail)
        await q.dlq_retry(job_id)
        await q.purge("q")
    text = path.read_text()
    assert SECRET not in text
    records = [json.loads(line) for line in lines(path)]
    assert [r["name"] for r in records] == [
        "system.queue.progress",
        "system.queue.dlq.write",
        "system.queue.dlq.retry",
        "system.queue.purge",
    ]
    progress = records[0]["data"]
    assert progress["percent"] == 50
    assert progress["data_keys"] == 2
    assert progress["data_bytes"] > 0
    assert records[1]["data"]["error_type"] == "RuntimeError"
    assert verify_chain(path, KEYRING).ok


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("RuntimeError: declined 4111", "RuntimeError"),
        ("queue/unseal-failed: the stored value", "queue/unseal-failed"),
        ("card 4111 1111 was declined", "unknown"),
        (None, "unknown"),
    ],
)
def test_an_error_is_audited_by_its_type_only(text: str | None, kept: str) -> None:
    assert error_type(text) == kept


# -- anchoring the head in the logs ------------------------------------------------------------
async def test_the_logging_sink_logs_the_file_head_every_n_events_and_at_shutdown(
    tmp_path: Path, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    files = JsonlAuditSink(path, keys=KEYS)
    logs = LoggingAuditSink(head_every=2)
    with caplog.at_level(logging.INFO, logger="blamequeue.audit"):
        async with Queue(
            backends={"b": {"protocol": "memory"}}, clock=clock, audit_sinks=[files, logs]
        ) as q:
            for _ in range(3):
                await q.purge("q")
    heads = [r.audit_head for r in caplog.records if hasattr(r, "audit_head")]  # type: ignore[attr-defined]
    macs = [json.loads(line)["mac"] for line in lines(path)]
    assert [(h["count"], h["hash"]) for h in heads] == [(2, macs[1]), (3, macs[2])]
    assert heads[-1]["file"] == str(path)
    assert verify_chain(path, KEYRING).holds(heads[0]["count"], heads[0]["hash"]) is None


def test_the_logging_sink_refuses_a_head_interval_below_one() -> None:
    with pytest.raises(ConfigError):
        LoggingAuditSink(head_every=0)
