"""A producer process of the restart scenario (run as a script, not collected by pytest).

usage: producer.py BACKEND QUEUE LEDGER AUDIT EVENT_LOOP PACE STOP

Enqueues one job at a time to QUEUE on BACKEND (a backend config as JSON), PACE seconds apart,
until the file STOP exists, then exits with status 0.  After each enqueue it appends to LEDGER
one line: ``acked <job id> <unix time>`` when the queue acknowledged it, ``error <code>
<retryable> <unix time> <message>`` when the queue refused it (a refused job is simply not
acknowledged: the producer goes on with the next one, as an application would).  The queue's
audit events go to the JSON-lines file AUDIT.  Any other exception ends the process with a
traceback and a non-zero status: the scenario fails on it.
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

from blamequeue import JsonlAuditSink, Queue, QueueError

#: After a refusal, before the next try: a producer that hammers an open breaker learns nothing.
ERROR_PAUSE = 0.05


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # a stuck producer can be asked for its stacks
    logging.basicConfig(level=logging.WARNING)
    backend, queue_name, ledger_path, audit_path, event_loop, pace, stop = sys.argv[1:8]
    config = json.loads(backend)
    ledger = open(ledger_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    pid = os.getpid()

    async def run() -> None:
        queue = Queue(
            backends={config["protocol"]: config},
            sweep_interval=0,
            audit_sinks=[JsonlAuditSink(audit_path)],
        )
        async with queue:
            n = 0
            while not await anyio.Path(stop).exists():
                try:
                    job_id = await queue.enqueue(queue_name, {"producer": pid, "n": n})
                except QueueError as exc:
                    message = " ".join(exc.message.split())
                    ledger.write(f"error {exc.code} {exc.retryable} {time.time()} {message}\n")
                    await anyio.sleep(ERROR_PAUSE)
                else:
                    ledger.write(f"acked {job_id} {time.time()}\n")
                    await anyio.sleep(float(pace))
                n += 1

    anyio.run(run, backend=event_loop)


if __name__ == "__main__":
    main()
