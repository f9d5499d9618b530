"""A worker process for the cross-process result and progress tests (run as a script, not
collected by pytest).

usage: progress_child.py CONFIG_JSON QUEUE
  ticks QUEUE once on the backend CONFIG_JSON; the handler reports progress twice and returns
  {"pid": <this process's id>}.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from blamequeue import Job, JobContext, Queue


async def handler(job: Job, ctx: JobContext) -> dict[str, Any]:
    await ctx.progress(30, {"step": 1})
    await ctx.progress(70, {"step": 2})
    return {"pid": os.getpid()}


async def main(config: dict[str, Any], queue_name: str) -> None:
    async with Queue(backends={"child": config}, sweep_interval=0) as queue:
        result = await queue.tick(queue_name, handler)
        assert result.succeeded == 1, result


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]), sys.argv[2])
