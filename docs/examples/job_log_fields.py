"""Log records about a job carry its ``job_id``, ``queue``, ``attempt`` and ``backend``: a
formatter that shows them, and a job that fails.  Run it with ``python job_log_fields.py``."""

from __future__ import annotations

import logging
import sys

import anyio

from blamequeue import Job, JobContext, Queue

FIELDS = ("job_id", "queue", "attempt", "backend")


class WithJobFields(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{name}={getattr(record, name)}" for name in FIELDS if hasattr(record, name)
        )
        return f"{record.levelname} [{fields}] {record.getMessage().splitlines()[0]}"


async def refuse(job: Job, ctx: JobContext) -> None:
    raise ValueError("the mail server said no")


async def main(path: str = "jobs.db") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(WithJobFields())
    logger = logging.getLogger("blamequeue")
    logger.addHandler(handler)
    try:
        async with Queue(backends={"primary": {"protocol": "local", "path": path}}) as queue:
            await queue.enqueue("emails", {"to": "ada@example.com"}, max_attempts=1)
            await queue.tick("emails", refuse)
    finally:
        logger.removeHandler(handler)


if __name__ == "__main__":
    anyio.run(main)
