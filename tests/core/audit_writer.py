"""A process that appends audit events through ``JsonlAuditSink`` until it is killed.

Usage: ``python audit_writer.py FILE KEYS EVENTS``.  It writes EVENTS events, then starts the
next line with a plain ``os.write`` of its first bytes (as a write cut short by a crash
leaves them), prints ``torn`` and waits to be killed with SIGKILL.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

import anyio

from blamequeue import AuditEvent, JsonlAuditSink


async def main(path: str, keys: str, count: int) -> None:
    sink = JsonlAuditSink(path, keys=keys)
    for n in range(count):
        await sink.emit(
            AuditEvent(
                name="system.queue.dlq.write",
                time=datetime(2025, 1, 1, 0, 0, n % 60, tzinfo=UTC),
                backend="b",
                queue="q",
                job_id=f"job-{n}",
            )
        )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b'{"v":2,"seq":' + str(count + 1).encode() + b',"kid":"k1","pr')
    print("torn", flush=True)
    await anyio.sleep_forever()  # killed here, mid-line, as a crash would leave it


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
