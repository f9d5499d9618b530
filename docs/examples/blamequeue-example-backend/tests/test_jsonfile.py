"""What the conformance suite cannot know about this backend: its options and its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blamequeue import Job, JobContext, Queue, QueueError

from blamequeue_example import JsonFileBackend

pytestmark = pytest.mark.anyio


async def test_the_entry_point_makes_the_protocol_usable(tmp_path: Path) -> None:
    config = {"protocol": "jsonfile", "path": str(tmp_path / "jobs.json")}
    async with Queue(backends={"main": config}, sweep_interval=0) as queue:
        [status] = queue.list_backends()
    assert (status.name, status.protocol) == ("main", JsonFileBackend.protocol)


@pytest.mark.parametrize(
    ("options", "named"),
    [({"pth": "x.json"}, "'pth'"), ({"path": ""}, "'path'"), ({"fsync": "yes"}, "'fsync'")],
)
def test_bad_options_are_refused_at_construction_naming_the_option(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(QueueError) as raised:
        Queue(backends={"main": {"protocol": "jsonfile", **options}})
    assert raised.value.code == "queue/invalid-config"
    assert named in raised.value.message


async def test_jobs_survive_a_restart_sealed_in_the_file(tmp_path: Path) -> None:
    config = {"protocol": "jsonfile", "path": str(tmp_path / "jobs.json")}
    async with Queue(backends={"main": config}, sweep_interval=0) as queue:
        job_id = await queue.enqueue("emails", {"to": "ada@example.com"})

    stored = json.loads((tmp_path / "jobs.json").read_text())
    assert stored["jobs"][job_id]["payload"].startswith("bq1:")  # sealed at rest
    assert "ada@example.com" not in (tmp_path / "jobs.json").read_text()

    seen: list[object] = []

    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job.payload)

    async with Queue(backends={"main": config}, sweep_interval=0) as queue:
        result = await queue.tick("emails", record)
    assert (result.succeeded, seen) == (1, [{"to": "ada@example.com"}])


async def test_a_corrupt_file_is_a_clear_non_retryable_error(tmp_path: Path) -> None:
    (tmp_path / "jobs.json").write_text("{not json")
    config = {"protocol": "jsonfile", "path": str(tmp_path / "jobs.json"), "seal": False}
    async with Queue(backends={"main": config}, sweep_interval=0) as queue:
        with pytest.raises(QueueError) as raised:
            await queue.size("emails")
    assert raised.value.code == "queue/backend-unavailable"
    assert not raised.value.retryable
    assert "jobs.json" in raised.value.message


async def test_a_payload_altered_in_the_file_sends_its_job_to_the_dlq(tmp_path: Path) -> None:
    # The conformance suite cannot look inside this store, so its tamper test skips here.
    path = tmp_path / "jobs.json"
    config = {"protocol": "jsonfile", "path": str(path)}
    async with Queue(backends={"main": config}, sweep_interval=0) as queue:
        job_id = await queue.enqueue("emails", {"to": "ada@example.com"})
        stored = json.loads(path.read_text())
        sealed = stored["jobs"][job_id]["payload"]
        flipped = "A" if sealed[-10] != "A" else "B"
        stored["jobs"][job_id]["payload"] = sealed[:-10] + flipped + sealed[-9:]
        path.write_text(json.dumps(stored))

        async def never(job: Job, ctx: JobContext) -> None:
            raise AssertionError("an altered payload must not reach a handler")

        result = await queue.tick("emails", never)
        [dead] = await queue.dlq_list("emails")
    assert (result.moved_to_dlq, dead.job_id, dead.payload) == (1, job_id, None)
    assert dead.last_error is not None
    assert dead.last_error.startswith("queue/unseal-failed")
