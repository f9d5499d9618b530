"""SPEC §6 audit events of the queue operations: who, what, which job, never the payload."""

from __future__ import annotations

from datetime import UTC, datetime

from blamequeue import AuditEvent, Job, JobContext

from .fixtures import BACKEND, Conformance, succeed
from .requirements import requires

__all__ = ["TestAudit"]

SECRET = "payload-secret-7f3a"


def _no_payload(events: list[AuditEvent]) -> None:
    for event in events:
        assert SECRET not in repr(event), f"{event.name} carries the payload"


async def _secret_failure(job: Job, ctx: JobContext) -> None:
    raise RuntimeError("declined")  # the error text does not quote the payload


@requires("dlq", "the dead-letter events cannot happen")
class TestAudit:
    async def test_dlq_write_event_names_the_job_without_its_payload(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name, {"card": SECRET}, max_attempts=1, trace_id="tr-1", classification="pci"
        )
        await q.tick(name, _secret_failure)
        [event] = conformance.audit.named("system.queue.dlq.write")
        assert event.backend == BACKEND
        assert event.queue == name
        assert event.job_id == job_id
        assert event.trace_id == "tr-1"
        assert event.classification == "pci"
        assert event.time == datetime.fromtimestamp(conformance.now(), UTC)
        _no_payload(conformance.audit.events)

    async def test_dlq_write_event_for_an_expired_lease(self, conformance: Conformance) -> None:
        conformance.require_virtual_leases()
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name, {"card": SECRET}, max_attempts=1, trace_id="tr-2", classification="pci"
        )

        async def outlives(job: Job, ctx: JobContext) -> None:
            conformance.advance(31)
            await q.sweep()

        await q.tick(name, outlives, lease=30)
        [event] = conformance.audit.named("system.queue.dlq.write")
        assert (event.backend, event.queue, event.job_id) == (BACKEND, name, job_id)
        assert (event.trace_id, event.classification) == ("tr-2", "pci")
        _no_payload(conformance.audit.events)

    async def test_dlq_retry_event_names_the_job(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name, {"card": SECRET}, max_attempts=1, trace_id="tr-3", classification="pci"
        )
        await q.tick(name, _secret_failure)
        assert await q.dlq_retry(job_id)
        [event] = conformance.audit.named("system.queue.dlq.retry")
        assert (event.backend, event.queue, event.job_id) == (BACKEND, name, job_id)
        assert (event.trace_id, event.classification) == ("tr-3", "pci")
        _no_payload(conformance.audit.events)

    async def test_no_dlq_retry_event_for_an_unknown_job(self, conformance: Conformance) -> None:
        assert await conformance.queue.dlq_retry("job-" + "0" * 26) is False
        assert conformance.audit.named("system.queue.dlq.retry") == []

    async def test_purge_event_names_backend_and_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [{"card": SECRET}, {"card": SECRET}])
        await q.purge(name)
        [event] = conformance.audit.named("system.queue.purge")
        assert (event.backend, event.queue) == (BACKEND, name)
        assert event.time == datetime.fromtimestamp(conformance.now(), UTC)
        _no_payload(conformance.audit.events)

    async def test_dlq_purge_event_names_backend_and_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, {"card": SECRET}, max_attempts=1)
        await q.tick(name, _secret_failure)
        await q.dlq_purge(name)
        [event] = conformance.audit.named("system.queue.dlq.purge")
        assert (event.backend, event.queue) == (BACKEND, name)
        _no_payload(conformance.audit.events)

    async def test_successful_job_writes_no_dlq_event(self, conformance: Conformance) -> None:
        await conformance.queue.enqueue(conformance.name, "fine")
        await conformance.queue.tick(conformance.name, succeed)
        assert conformance.audit.named("system.queue.dlq.write") == []
