"""A worker process of the crash scenario (run as a script, not collected by pytest).

usage:
  crash_worker.py BACKEND QUEUE LEDGER EVENT_LOOP LEASE CONCURRENCY WORK SWEEP_INTERVAL [AUDIT]

Consumes QUEUE until it is killed.  BACKEND is the path of a SQLite file (the ``local``
backend) or a whole backend config as JSON (``{"protocol": "redis", "url": ...}``); with AUDIT,
the queue also appends its audit events to that JSON-lines file (a ``JsonlAuditSink``).

Each handler first appends one line ``<job id> <pid> <attempt> <unix time>`` to LEDGER (its
side effect, done first: the worst case for at-least-once, since a kill at any later point
leaves a run that happened but was never acknowledged), then sleeps WORK seconds (this paces
the drain so the test's kills land while jobs are running).  The ledger is opened in append
mode with line buffering: each record is one write(2), which the kernel keeps even when the
process is SIGKILLed right after it.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import time

import anyio

from blamequeue import Job, JobContext, JsonlAuditSink, Queue


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # a stuck worker can be asked for its stacks
    logging.basicConfig(level=logging.WARNING)
    backend, queue_name, ledger_path, event_loop = sys.argv[1:5]
    lease, concurrency, work, sweep_interval = sys.argv[5:9]
    audit = [JsonlAuditSink(path) for path in sys.argv[9:10]]
    if backend.startswith("{"):
        config = json.loads(backend)
    else:
        config = {"protocol": "local", "path": backend}
    pid = os.getpid()
    ledger = open(ledger_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    async def handler(job: Job, ctx: JobContext) -> None:
        ledger.write(f"{job.id} {pid} {job.attempts} {time.time()}\n")
        await anyio.sleep(float(work))

    async def run() -> None:
        queue = Queue(
            backends={config["protocol"]: config},
            sweep_interval=float(sweep_interval),
            audit_sinks=audit,
        )
        async with queue:
            await queue.consume(
                queue_name,
                handler,
                concurrency=int(concurrency),
                lease=float(lease),
                poll_interval=0.1,
            )
            await anyio.sleep_forever()

    anyio.run(run, backend=event_loop)


if __name__ == "__main__":
    main()
