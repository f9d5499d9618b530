"""What a batch record holds is sealed and bound to its batch (SPEC §6): callbacks still get
their payloads, a failed job's error is kept sealed, and a callback rewritten in the store does
not run."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from blamequeue import Queue
from blamequeue._codec import place
from blamequeue._records import decode_value

pytestmark = pytest.mark.anyio

SECRET = "callback-secret-5c1d"


def tasks(queue: Queue, ran: list[tuple[str, Any]]) -> None:
    @queue.task(name="Step", queue="work", tries=1)
    async def step(payload: Any, ctx: Any) -> None:
        if payload == "fail":
            raise RuntimeError(f"step failed on {SECRET}")

    @queue.task(name="Notify", queue="work")
    async def notify(payload: Any, ctx: Any) -> None:
        ran.append(("Notify", payload))

    @queue.task(name="Wipe", queue="work")
    async def wipe(payload: Any, ctx: Any) -> None:
        ran.append(("Wipe", payload))


async def run(queue: Queue) -> None:
    for _ in range(4):
        if not (await queue.tick("work", queue.tasks, max=20)).leased:
            return


@pytest.mark.parametrize("seal", [None, False], ids=["sealed", "seal-off"])
async def test_a_callback_gets_its_payload_back(seal: Any) -> None:
    config: dict[str, Any] = {"protocol": "memory"}
    if seal is False:
        config["seal"] = False
    ran: list[tuple[str, Any]] = []
    async with Queue(backends={"b": config}, sweep_interval=0) as queue:
        tasks(queue, ran)
        await queue.batch([("Step", 1)]).then("Notify", {"note": SECRET}).dispatch()
        await run(queue)
    assert ran == [("Notify", {"note": SECRET})]


async def test_the_batch_record_holds_the_callback_payload_and_error_sealed() -> None:
    async with Queue(backends={"b": {"protocol": "memory"}}, sweep_interval=0) as queue:
        tasks(queue, [])
        batch = await queue.batch([("Step", "fail")]).catch("Notify", {"note": SECRET}).dispatch()
        await run(queue)
        records = queue.records()
        description = decode_value(await records.get("batch", batch.id))
        (failed,) = await records.list("batch-failed", prefix=f"{batch.id}:")
        codec = queue._runtimes["b"].codec
        error = decode_value(failed)["error"]
        job_id = failed.key.split(":", 1)[1]
    assert SECRET not in str(description)
    assert SECRET not in error
    assert SECRET in codec.open_text(error, place("batch", batch.id, "error", job_id))


async def test_a_callback_whose_task_was_rewritten_in_the_store_does_not_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[tuple[str, Any]] = []
    async with Queue(backends={"b": {"protocol": "memory"}}, sweep_interval=0) as queue:
        tasks(queue, ran)
        batch = await queue.batch([("Step", 1)]).then("Notify", {"note": SECRET}).dispatch()
        records = queue.records()
        description = decode_value(await records.get("batch", batch.id))
        description["callbacks"]["then"]["task"] = "Wipe"  # same payload, another task
        await records.put("batch", batch.id, description)
        with caplog.at_level(logging.ERROR, logger="blamequeue"):
            await run(queue)
    assert ran == []
    assert "queue/unseal-failed" in caplog.text
