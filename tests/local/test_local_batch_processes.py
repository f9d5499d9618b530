"""A batch's callbacks fire after the process that dispatched it has exited: one process
dispatches a batch and exits; a worker in another process runs the jobs and, when the last one
finishes, the ``then`` and ``finally`` callbacks it finds stored with the batch."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from blamequeue import Queue

pytestmark = pytest.mark.anyio

_APP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import anyio
    from blamequeue import Queue

    db, out = sys.argv[1], Path(sys.argv[2])
    queue = Queue(backends={"l": {"protocol": "local", "path": db}})

    @queue.task(name="Resize", queue="images")
    async def resize(payload, ctx):
        pass

    @queue.task(name="Announce", queue="notices")
    async def announce(payload, ctx):
        with out.open("a") as f:
            f.write(f"{payload} {ctx.job.context['batch_id']}\\n")

    async def dispatch():
        async with queue:
            batch = await (
                queue.batch([("Resize", n) for n in range(5)])
                .then("Announce", "then").finally_("Announce", "finally").dispatch()
            )
            print(batch.id, flush=True)

    async def work():
        async with queue:
            for _ in range(200):
                await queue.tick("images", queue.tasks, max=10)
                await queue.tick("notices", queue.tasks, max=10)
                if out.exists() and len(out.read_text().split()) == 4:
                    return
                await anyio.sleep(0.02)

    anyio.run(dispatch if sys.argv[3] == "dispatch" else work, backend=sys.argv[4])
    """
)


async def test_callbacks_fire_after_the_dispatcher_exited(
    tmp_path: Path, anyio_backend: str
) -> None:
    db, out, app = tmp_path / "jobs.db", tmp_path / "announced.txt", tmp_path / "app.py"
    app.write_text(_APP)
    other = "trio" if anyio_backend == "asyncio" else "asyncio"
    with anyio.fail_after(60):
        dispatcher = await anyio.run_process(
            [sys.executable, str(app), str(db), str(out), "dispatch", anyio_backend]
        )
        batch_id = dispatcher.stdout.decode().strip()
        assert batch_id.startswith("batch-")
        await anyio.run_process([sys.executable, str(app), str(db), str(out), "work", other])
    assert sorted(out.read_text().splitlines()) == [f"finally {batch_id}", f"then {batch_id}"]
    async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
        batch = await queue.find_batch(batch_id)
        assert batch is not None
        assert (batch.total, batch.processed, batch.failed, batch.finished) == (5, 5, 0, True)
