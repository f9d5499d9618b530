"""Job control in one file: chosen ids, edits, RetryLater, logs and progress, rerun.

Run it with ``python docs/examples/job_control.py`` (SQLite in a temporary folder).
"""

import tempfile

import anyio

from blamequeue import Job, JobContext, Queue, RetryLater

calls = {"charge": 0}


async def charge(job: Job, ctx: JobContext) -> str:
    calls["charge"] += 1
    await ctx.log(f"charging order {job.payload['order']}")
    await ctx.progress(50, {"step": "card"})
    if calls["charge"] == 1:
        raise RetryLater(1)  # the card service asked us to come back: not a failed attempt
    await ctx.progress(100)
    return "charged"


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = {"protocol": "local", "path": f"{folder}/jobs.db"}
        async with Queue(backends={"main": config}) as queue:
            # The same id twice: one job (an idempotent producer).
            first = await queue.enqueue("orders", {"order": 42}, job_id="order-42", delay=3600)
            again = await queue.enqueue("orders", {"order": 42}, job_id="order-42")
            assert first == again == "order-42"
            assert await queue.size("orders") == 1

            # It is due in an hour: bring it forward, then change what it carries.
            assert await queue.change_delay("order-42", 1)
            assert await queue.promote("order-42")
            assert await queue.update_payload("order-42", {"order": 42, "rush": True})

            print(await queue.tick("orders", charge))  # deferred by RetryLater(1)
            await anyio.sleep(1.1)
            print(await queue.tick("orders", charge))  # succeeded, attempts == 1

            info = await queue.job_info("order-42")
            assert info is not None
            assert info.progress is not None
            print(info.state, info.job.attempts, info.progress.percent)
            for line in await queue.job_logs("order-42"):
                print(line.time.isoformat(), line.attempt, line.message)

            # A finished job can run again, attempts reset.
            assert await queue.rerun("order-42")
            print(await queue.tick("orders", charge))


if __name__ == "__main__":
    anyio.run(main)
