"""SPEC §6: payloads and errors sealed at rest, key rotation, unreadable rows, the key file, and
the audit events of a job's life (fields present, payload absent, progress rate-limited).

What a backend stores is read back through the backend itself (``Backend.dlq_list`` hands back
the stored strings verbatim), so most tests hold for any backend.  Two kinds of test need to see
or change the store underneath: they know the ``local`` database files and the ``memory`` rows,
and skip, saying so, for other stores.  Tests that look at one store through several queues
skip unless the queues share it (see :meth:`Conformance.require_shared_store`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import multiprocessing
import os
import secrets
import sqlite3
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from blamequeue import Job, JobContext, Queue, QueueError
from blamequeue.abc import Backend, DeadLetters, StoredJob
from blamequeue.errors import SealKeyMissingError

from .fixtures import BACKEND, Conformance, succeed, wait_until
from .requirements import requires
from .running import stop

__all__ = ["TestAuditTrail", "TestSealKeyFile", "TestSealing"]

PAYLOAD_SECRET = "4111-payload-secret-93c1"
ERROR_SECRET = "error-secret-5d7e"
_ENVELOPE = "bq1:"


def _key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _backend(queue: Queue) -> Backend:
    """The backend object under a queue (the suite's only reach into the queue's insides)."""
    backend: Backend = queue._runtimes[BACKEND].backend
    return backend


async def _raw_dead(queue: Queue, name: str) -> list[StoredJob]:
    """The dead rows of ``name`` as the backend stores them: sealed strings, not decoded."""
    return await DeadLetters.of(_backend(queue)).dlq_list(name, limit=None)


async def _leaky(job: Job, ctx: JobContext) -> None:
    raise RuntimeError(f"declined: {ERROR_SECRET}")


class _Store:
    """Reads and alters the store under a backend, for the stores this suite knows."""

    def __init__(self, backend: Backend, config: Mapping[str, Any]) -> None:
        self.backend = backend
        self.config = config
        self.rows: dict[str, Any] | None = None
        self.path: str | None = None
        store = getattr(backend, "_store", None)
        if backend.protocol == "memory" and hasattr(store, "jobs"):
            self.rows = store.jobs  # type: ignore[union-attr]
        elif backend.protocol == "local" and backend.store_path is not None:
            self.path = backend.store_path
        else:
            pytest.skip(
                f"the suite cannot look under a {backend.protocol!r} store (it knows the local "
                f"database files and the memory rows); what the backend hands back is checked "
                f"by the other sealing tests"
            )

    def everything(self) -> bytes:
        """Every byte the store holds (database and its -wal / -shm files, or every row)."""
        if self.rows is not None:
            return "\n".join(
                f"{row.payload}\n{row.last_error}\n{row.meta}" for row in self.rows.values()
            ).encode("utf-8")
        assert self.path is not None
        data = b""
        for suffix in ("", "-wal", "-shm", "-journal"):
            file = Path(self.path + suffix)
            if file.exists():
                data += file.read_bytes()
        return data

    def tamper(self, job_id: str) -> None:
        """Change one character inside the sealed payload of ``job_id``."""

        def flip(sealed: str) -> str:
            position = len(sealed) - 10
            swapped = "A" if sealed[position] != "A" else "B"
            return sealed[:position] + swapped + sealed[position + 1 :]

        self.set(job_id, "payload", flip(self.get(job_id, "payload")))

    def get(self, job_id: str, column: str) -> str:
        """The stored text of one column (``payload``, ``meta``...) of ``job_id``."""
        if self.rows is not None:
            value: str = getattr(self.rows[job_id], column)
            return value
        with self._connection() as (connection, table):
            (value,) = connection.execute(
                f'SELECT "{column}" FROM "{table}" WHERE id = ?', (job_id,)
            ).fetchone()
            return str(value)

    def set(self, job_id: str, column: str, value: str) -> None:
        """Overwrite one column of ``job_id`` in the store, as someone with write access can."""
        if self.rows is not None:
            setattr(self.rows[job_id], column, value)
            return
        with self._connection() as (connection, table):
            connection.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE id = ?', (value, job_id))

    @contextlib.contextmanager
    def _connection(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        assert self.path is not None
        table = str(self.config.get("table", "blamequeue_jobs"))
        if self.config.get("schema") not in (None, "main"):
            pytest.skip("the tamper helper only knows the main schema")
        connection = sqlite3.connect(self.path, timeout=10)
        try:
            with connection:
                yield connection, table
        finally:
            connection.close()


async def _unseal_failures_reach_the_dlq(
    conformance: Conformance, reader: Queue, bad_id: str, others: Sequence[str] = ()
) -> str:
    """Run a consumer on ``reader``: the unreadable job goes to the DLQ, and the same worker
    runs the readable ones (``others``, and one enqueued after it).  Returns the dead job's
    last error."""
    name = conformance.name
    seen: list[str] = []

    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job.id)

    consumer = await reader.consume(name, record, poll_interval=0.01)
    await wait_until(lambda: consumer.stats.moved_to_dlq == 1, "the bad job to reach the DLQ")
    good_id = await reader.enqueue(name, "readable")
    await wait_until(lambda: len(seen) == len(others) + 1, "the worker to run the next job")
    await stop(consumer)
    assert sorted(seen) == sorted([*others, good_id])
    assert (consumer.stats.succeeded, consumer.stats.failed) == (len(others) + 1, 1)
    [dead] = await reader.dlq_list(name)
    assert dead.job_id == bad_id
    assert dead.payload is None
    assert dead.last_error is not None
    assert dead.last_error.startswith("queue/unseal-failed")
    [event] = conformance.audit.named("system.queue.dlq.write")
    assert event.job_id == bad_id
    assert event.data["error_type"] == "queue/unseal-failed"
    return dead.last_error


@requires("dlq", "unreadable jobs are checked in the dead-letter queue")
class TestSealing:
    @pytest.fixture
    def store(self, conformance: Conformance, bq_backend_config: Mapping[str, Any]) -> _Store:
        """The store under the test's queue, read and altered behind the queue's back."""
        return _Store(_backend(conformance.queue), bq_backend_config)

    async def test_payload_and_last_error_are_stored_sealed(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, {"card": PAYLOAD_SECRET}, max_attempts=1)
        await q.tick(name, _leaky)
        [raw] = await _raw_dead(q, name)
        assert raw.payload.startswith(_ENVELOPE)
        assert raw.last_error is not None
        assert raw.last_error.startswith(_ENVELOPE)
        assert PAYLOAD_SECRET not in raw.payload + raw.last_error
        assert ERROR_SECRET not in raw.payload + raw.last_error
        [dead] = await q.dlq_list(name)
        assert (dead.job_id, dead.payload) == (job_id, {"card": PAYLOAD_SECRET})
        assert dead.last_error is not None
        assert dead.last_error.startswith(f"RuntimeError: declined: {ERROR_SECRET}")

    async def test_plaintext_appears_nowhere_in_the_store(
        self, conformance: Conformance, store: _Store
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, {"card": PAYLOAD_SECRET}, max_attempts=1)
        await q.tick(name, _leaky)  # dead: payload and error at rest
        await q.enqueue(name, {"card": PAYLOAD_SECRET}, max_attempts=3)
        await q.tick(name, _leaky)  # pending again, with a last error
        await q.enqueue(name, {"card": PAYLOAD_SECRET})  # pending, never run
        held = store.everything()
        assert held, "the store looks empty: the check would prove nothing"
        for secret in (PAYLOAD_SECRET, ERROR_SECRET):
            assert secret.encode() not in held
            assert json.dumps(secret).encode() not in held

    async def test_old_rows_stay_readable_after_a_new_key_is_put_first(
        self, conformance: Conformance
    ) -> None:
        name, k1, k2 = conformance.name, _key(), _key()
        factory = conformance.factory
        async with (
            factory.open(seal={"keys": {"k1": k1}}) as old,
            factory.open(seal={"keys": {"k2": k2, "k1": k1}}) as rotated,
            factory.open(seal={"keys": {"k1": k1}}) as stale,
        ):
            await conformance.require_shared_store(old, rotated)
            await old.enqueue(name, "sealed with k1")
            await rotated.enqueue(name, "sealed with k2")
            seen: list[Any] = []

            async def record(job: Job, ctx: JobContext) -> None:
                seen.append(job.payload)

            result = await rotated.tick(name, record)
            assert (result.succeeded, sorted(seen)) == (2, ["sealed with k1", "sealed with k2"])

            # The rotated queue seals with k2, which a queue knowing only k1 cannot read: not
            # the job's fault, so it is handed back untouched and the stale queue stops leasing.
            await rotated.enqueue(name, "new")
            result = await stale.tick(name, succeed)
            assert (result.leased, result.failed, result.moved_to_dlq) == (1, 0, 0)
            with pytest.raises(QueueError) as refused:
                await stale.tick(name, succeed)
            assert isinstance(refused.value, SealKeyMissingError)
            assert refused.value.key_id == "k2"
            assert "'k2'" in refused.value.message
            assert await rotated.dlq_size(name) == 0
            assert await rotated.size(name) == 1
            attempts: list[int] = []

            async def count(job: Job, ctx: JobContext) -> None:
                attempts.append(job.attempts)

            assert (await rotated.tick(name, count)).succeeded == 1
            if _backend(rotated).capabilities.inspection:  # SQS counts every receive
                assert attempts == [1]  # the released attempt was given back

    async def test_a_tampered_row_goes_to_the_dlq_and_the_worker_goes_on(
        self, conformance: Conformance, store: _Store
    ) -> None:
        q, name = conformance.queue, conformance.name
        bad = await q.enqueue(name, {"card": PAYLOAD_SECRET})
        store.tamper(bad)
        error = await _unseal_failures_reach_the_dlq(conformance, q, bad)
        assert "failed authentication" in error
        assert PAYLOAD_SECRET not in error

    async def test_a_row_sealed_under_the_same_key_id_with_another_key_goes_to_the_dlq(
        self, conformance: Conformance
    ) -> None:
        name = conformance.name
        async with (
            conformance.factory.open(seal={"keys": {"k1": _key()}}) as forger,
            conformance.factory.open(seal={"keys": {"k1": _key()}}) as reader,
        ):
            await conformance.require_shared_store(forger, reader)
            bad = await forger.enqueue(name, "forged")
            error = await _unseal_failures_reach_the_dlq(conformance, reader, bad)
            assert "failed authentication" in error

    async def test_a_worker_without_the_key_releases_jobs_and_stops_leasing(
        self, conformance: Conformance
    ) -> None:
        """SPEC §6: a misconfigured worker beside a right one dead-letters nothing, and every
        job is done by the worker holding the key."""
        name, key = conformance.name, _key()
        async with (
            conformance.factory.open(seal={"keys": {"k1": key}}) as right,
            conformance.factory.open(seal={"keys": {"elsewhere": _key()}}) as wrong,
        ):
            await conformance.require_shared_store(right, wrong)
            errors: list[Any] = []
            wrong.on("queue.error", errors.append)
            done_by: dict[str, list[Any]] = {"right": [], "wrong": []}

            def recorder(who: str) -> Any:
                async def record(job: Job, ctx: JobContext) -> None:
                    done_by[who].append(job.payload)

                return record

            ids = await right.enqueue_many(name, list(range(20)))
            bad = await wrong.consume(name, recorder("wrong"), concurrency=4, poll_interval=0.01)
            await wait_until(lambda: bool(errors), "the worker without the key to report it")
            good = await right.consume(name, recorder("right"), concurrency=4, poll_interval=0.01)
            await wait_until(lambda: len(done_by["right"]) == len(ids), "every job to be done")
            for consumer in (good, bad):
                await stop(consumer)
            assert sorted(done_by["right"]) == list(range(20))
            assert done_by["wrong"] == []
            assert await right.dlq_size(name) == 0
            assert (bad.stats.failed, bad.stats.moved_to_dlq) == (0, 0)
            assert errors[0].data["key_id"] == "k1"
            report = await wrong.health()
            assert report.status == "unhealthy"
            assert [a.check for a in report.alerts if "'k1'" in a.message] == ["seal-key"]
            with pytest.raises(SealKeyMissingError):
                await wrong.tick(name, succeed)

    async def test_a_payload_copied_into_another_job_does_not_run(
        self, conformance: Conformance, store: _Store
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, {"card": PAYLOAD_SECRET})
        second = await q.enqueue(name, {"card": "other"})
        store.set(second, "payload", store.get(first, "payload"))
        error = await _unseal_failures_reach_the_dlq(conformance, q, second, others=[first])
        assert "tampered" in error
        assert PAYLOAD_SECRET not in error

    async def test_a_task_name_rewritten_in_the_store_does_not_run(
        self, conformance: Conformance, store: _Store
    ) -> None:
        q, name = conformance.queue, conformance.name
        ran: list[str] = []

        @q.task(queue=name, name="harmless")
        async def harmless(job: Job, ctx: JobContext) -> None:
            ran.append("harmless")

        @q.task(queue=name, name="dangerous")
        async def dangerous(job: Job, ctx: JobContext) -> None:
            ran.append("dangerous")

        bad = await q.job("harmless", {"n": 1}).with_context(user="ada").dispatch()
        meta = store.get(bad, "meta")
        assert "ada" not in meta  # the context is sealed, the task name readable
        store.set(bad, "meta", meta.replace('"harmless"', '"dangerous"'))
        result = await q.tick(name, q.tasks)
        assert (result.moved_to_dlq, ran) == (1, [])
        [dead] = await q.dlq_list(name)
        assert dead.last_error is not None
        assert "tampered" in dead.last_error

    async def test_seal_false_stores_plain_json(self, conformance: Conformance) -> None:
        name = conformance.name
        async with conformance.factory.open(seal=False) as plain:
            await plain.enqueue(name, {"card": "visible"}, max_attempts=1)
            await plain.tick(name, _leaky)
            [raw] = await _raw_dead(plain, name)
            assert json.loads(raw.payload) == {"card": "visible"}
            assert raw.last_error is not None
            assert raw.last_error.startswith(f"RuntimeError: declined: {ERROR_SECRET}")
            [dead] = await plain.dlq_list(name)
            assert dead.payload == {"card": "visible"}

    async def test_a_sealed_queue_refuses_plain_rows_unless_told_to_accept_them(
        self, conformance: Conformance
    ) -> None:
        name, key = conformance.name, _key()
        async with (
            conformance.factory.open(seal=False) as plain,
            conformance.factory.open(seal={"keys": {"k1": key}}) as strict,
            conformance.factory.open(seal={"keys": {"k1": key}, "accept_unsealed": True}) as lax,
        ):
            await conformance.require_shared_store(plain, strict)
            await plain.enqueue(name, "written before sealing was on")
            result = await strict.tick(name, succeed)
            assert result.moved_to_dlq == 1
            [dead] = await strict.dlq_list(name)
            assert dead.last_error is not None
            assert dead.last_error.startswith("queue/unseal-failed")
            assert "seal=False" in dead.last_error

            await plain.enqueue(name, "migrating")
            seen: list[Any] = []

            async def record(job: Job, ctx: JobContext) -> None:
                seen.append(job.payload)

            await lax.tick(name, record)
            assert seen == ["migrating"]


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _start_and_enqueue(config: dict[str, Any], barrier: Any, payload: str) -> None:
    """In a child process: start a queue on ``config`` together with a sibling, enqueue."""

    async def main() -> None:
        queue = Queue(backends={BACKEND: config}, sweep_interval=0)
        barrier.wait()
        async with queue:
            await queue.enqueue("key-race", payload)

    anyio.run(main)


@pytest.mark.anyio
class TestSealKeyFile:
    """Stores with a file (``Backend.store_path``) keep their key beside it when none is set."""

    @pytest.fixture(autouse=True)
    def _needs_a_store_file(self, conformance: Conformance) -> None:
        if _backend(conformance.queue).store_path is None:
            pytest.skip("the backend has no store_path: it keeps no key file")

    def _key_file(self, conformance: Conformance) -> Path:
        path = _backend(conformance.queue).store_path
        assert path is not None
        return Path(path + ".key")

    async def test_key_file_is_created_beside_the_store_with_mode_0600(
        self, conformance: Conformance
    ) -> None:
        key_file = self._key_file(conformance)
        assert _mode(str(key_file)) == 0o600
        [line] = [ln for ln in key_file.read_text().splitlines() if not ln.startswith("#")]
        kid, _, key = line.partition(":")
        assert kid
        assert len(base64.b64decode(key, validate=True)) == 32

    async def test_a_second_queue_reuses_the_key_file(self, conformance: Conformance) -> None:
        key_file = self._key_file(conformance)
        before = key_file.read_bytes()
        await conformance.queue.enqueue(conformance.name, "sealed by the first queue")
        async with conformance.factory.open() as second:
            seen: list[Any] = []

            async def record(job: Job, ctx: JobContext) -> None:
                seen.append(job.payload)

            await second.tick(conformance.name, record)
        assert seen == ["sealed by the first queue"]
        assert key_file.read_bytes() == before

    async def test_two_processes_starting_at_once_agree_on_one_key(
        self, conformance: Conformance, bq_backend_config: Mapping[str, Any], tmp_path: Path
    ) -> None:
        if "path" not in bq_backend_config:
            pytest.skip("the backend config has no 'path' to point at a fresh store")
        config = {**bq_backend_config, "path": str(tmp_path / "race.db")}
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(2)
        children = [
            context.Process(target=_start_and_enqueue, args=(config, barrier, f"from {n}"))
            for n in range(2)
        ]
        for child in children:
            child.start()
        for child in children:
            await anyio.to_thread.run_sync(child.join, 60)
        assert [child.exitcode for child in children] == [0, 0]

        assert _mode(config["path"] + ".key") == 0o600
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".blamequeue-key-")]
        # The children ran on the system clock; read their jobs on it too.
        async with Queue(backends={BACKEND: config}, sweep_interval=0) as reader:
            seen: list[Any] = []

            async def record(job: Job, ctx: JobContext) -> None:
                seen.append(job.payload)

            result = await reader.tick("key-race", record)
        assert result.moved_to_dlq == 0
        assert sorted(seen) == ["from 0", "from 1"]


@pytest.mark.anyio
class TestAuditTrail:
    """Every event names backend, queue, job, trace and classification; none carries a payload."""

    def _assert_names_the_job(self, event: Any, name: str, job_id: str, trace: str) -> None:
        assert event.backend == BACKEND
        assert event.queue == name
        assert event.job_id == job_id
        assert event.trace_id == trace
        assert event.classification == "restricted"
        assert PAYLOAD_SECRET not in repr(event)

    async def test_progress_markers_are_rate_limited_per_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name, {"card": PAYLOAD_SECRET}, trace_id="tr-p", classification="restricted"
        )

        async def chatty(job: Job, ctx: JobContext) -> None:
            for percent in range(100):  # a flood within one second: one marker
                await ctx.progress(percent)
            conformance.advance(1.0)
            await ctx.progress(50)  # a second later: one more
            for _ in range(5):
                await ctx.progress(100)  # completion: recorded once

        result = await q.tick(name, chatty)
        assert result.succeeded == 1
        events = conformance.audit.named("system.queue.progress")
        assert [event.data["percent"] for event in events] == [0, 50, 100]
        for event in events:
            self._assert_names_the_job(event, name, job_id, "tr-p")

    async def test_each_expired_lease_is_one_event_naming_its_job(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_leases()
        q, name = conformance.queue, conformance.name
        ids = [
            await q.enqueue(
                name, {"card": PAYLOAD_SECRET}, trace_id=f"tr-{n}", classification="restricted"
            )
            for n in range(2)
        ]
        swept: list[int] = []

        async def outlives(job: Job, ctx: JobContext) -> None:
            if not swept:
                conformance.advance(31)
                swept.append(await q.sweep())

        await q.tick(name, outlives, max=2, lease=30)
        assert swept == [2]
        events = conformance.audit.named("system.queue.lease.expired")
        if len(events) == 1 and events[0].job_id is None:
            # The backend did not name the jobs (SweepResult.expired): one event with the count.
            assert events[0].data["repended"] == 2
            return
        assert sorted(str(event.job_id) for event in events) == sorted(ids)
        for event in events:
            assert event.job_id is not None
            self._assert_names_the_job(event, name, event.job_id, f"tr-{ids.index(event.job_id)}")

    async def test_no_event_carries_a_payload_or_an_error_text(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name,
            {"card": PAYLOAD_SECRET},
            max_attempts=1,
            trace_id="tr-x",
            classification="restricted",
        )

        async def progress_then_fail(job: Job, ctx: JobContext) -> None:
            await ctx.progress(10)
            await _leaky(job, ctx)

        await q.tick(name, progress_then_fail)
        if conformance.capabilities.dlq:
            await q.dlq_retry(job_id)
        await q.purge(name)
        assert conformance.audit.events
        for event in conformance.audit.events:
            text = repr(event) + json.dumps(event.to_dict())
            assert PAYLOAD_SECRET not in text
            assert ERROR_SECRET not in text
            if event.job_id is not None:
                self._assert_names_the_job(event, name, job_id, "tr-x")
