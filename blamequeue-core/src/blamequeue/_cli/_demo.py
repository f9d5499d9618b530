"""``blamequeue demo``: the whole life of a job, narrated, on a throwaway SQLite queue.

Real time, real backend, public API only: what the newcomer sees is what their code will do.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio

from blamequeue import AuditEvent, Consumer, ExponentialBackoff, FixedBackoff, Job, Queue

from ._config import new_database
from ._running import (
    EXIT_OK,
    Subparsers,
    add_command,
    add_loop_option,
    run_on_loop,
    stopped_by_signals,
)
from ._terminal import Terminal, format_table

__all__ = ["add_parser", "run"]


_STEPS = 7
_BULK_JOBS = 200
_STEP_TIMEOUT = 30.0  # a demo that hangs is worse than one that fails loudly

# The default backoff, to announce each retry before the engine schedules it.
_DEFAULT_BACKOFF = ExponentialBackoff()
_DLQ_BACKOFF_SPEC = {"strategy": "fixed", "delay": 0.5}
_DLQ_BACKOFF = FixedBackoff(delay=0.5)


_MANUAL = """\
walk through a job's whole lifecycle on a throwaway SQLite queue (~10 s)

Show the life of a job on the embedded SQLite backend: enqueue, priority,
delay, retries with backoff, the dead-letter queue and an operator retry, then a
batch drained by a worker.

examples:
  blamequeue demo                   # on a temporary SQLite file, deleted afterwards
  blamequeue demo --keep            # keep the database to poke at it afterwards
  blamequeue demo --path demo.db    # use (and keep) this file; it must not exist yet
  NO_COLOR=1 blamequeue demo        # no colours

The demo takes about 10 seconds: the waits you see (a 2 s delay, retries after 1 s and 2 s)
are real, because they are what your jobs will do.
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_command(subparsers, "demo", _MANUAL, run=run)
    parser.add_argument(
        "--path",
        metavar="FILE",
        help="SQLite file to create for the demo and keep afterwards (must not exist yet)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary database afterwards and print where it is",
    )
    add_loop_option(parser)


class _Narrator:
    """Numbered steps, code the user can copy, and events stamped with the time since the
    step began (so the waits are visible)."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self._step = 0
        self._t0 = time.monotonic()

    def title(self, text: str) -> None:
        self.term.print(self.term.style(text, "bold"))

    def step(self, name: str, text: str) -> None:
        self._step += 1
        self._t0 = time.monotonic()
        self.term.print()
        head = f"[{self._step}/{_STEPS}] {name}."
        width = max(40, min(self.term.width, 100) - 1)
        lines = textwrap.wrap(f"{head} {text}", width=width, subsequent_indent="  ")
        first = lines[0].replace(head, self.term.style(head, "bold", "cyan"), 1)
        for line in [first, *lines[1:]]:
            self.term.print(line)

    def code(self, snippet: str) -> None:
        self.term.print("    " + self.term.style(snippet, "dim"))

    def info(self, text: str) -> None:
        self.term.print(f"  {text}")

    def event(self, text: str, *styles: str) -> None:
        stamp = self.term.style(f"+{time.monotonic() - self._t0:.1f}s".rjust(6), "dim")
        self.term.print(f"  {stamp}  {self.term.style(text, *styles)}")


async def _wait_for(event: anyio.Event, what: str) -> None:
    with anyio.move_on_after(_STEP_TIMEOUT) as scope:
        await event.wait()
    if scope.cancelled_caught:
        raise RuntimeError(f"the demo waited {_STEP_TIMEOUT:g} s for {what} in vain")


class _DeadLetterWatch:
    """An audit sink: the queue reports every job it moves to the dead-letter queue."""

    def __init__(self) -> None:
        self.written = anyio.Event()

    async def emit(self, event: AuditEvent) -> None:
        if event.name == "system.queue.dlq.write":
            self.written.set()


class _Demo:
    def __init__(
        self, queue: Queue, narrator: _Narrator, term: Terminal, watch: _DeadLetterWatch
    ) -> None:
        self.queue = queue
        self.dead_letters_watch = watch
        self.say = narrator
        self.term = term
        self.consumers: dict[str, Consumer] = {}
        self.enqueued: dict[str, int] = {}

    async def consume(self, queue_name: str, handler: Any, concurrency: int = 1) -> None:
        # A short poll interval so retries and delays start on time even without a wake-up.
        self.consumers[queue_name] = await self.queue.consume(
            queue_name, handler, concurrency=concurrency, poll_interval=0.1
        )

    async def enqueue(self, queue_name: str, payload: Any, **options: Any) -> str:
        job_id = await self.queue.enqueue(queue_name, payload, **options)
        self.enqueued[queue_name] = self.enqueued.get(queue_name, 0) + 1
        return job_id

    # -- steps 1-3: enqueue, priority, delay ------------------------------------------------
    async def ordering(self) -> None:
        say = self.say
        say.step(
            "Enqueue",
            "enqueue() stores the job durably and returns its id. No worker is running yet.",
        )
        say.code('job_id = await queue.enqueue("emails", {"to": "ada@example.com"})')
        for person in ("ada", "grace", "linus"):
            job_id = await self.enqueue("emails", {"what": f"welcome email to {person}"})
            say.info(f"enqueued {job_id}  welcome email to {person}")

        say.step("Priority", "A job enqueued last, with priority=10, goes before the others.")
        say.code('await queue.enqueue("emails", {...}, priority=10)')
        job_id = await self.enqueue(
            "emails", {"what": "password reset for alan", "note": "priority 10"}, priority=10
        )
        say.info(f"enqueued {job_id}  password reset for alan  (priority 10)")

        say.step("Delay", "A job enqueued with delay=2 waits 2 s before a worker may take it.")
        say.code('await queue.enqueue("emails", {...}, delay=2)')
        job_id = await self.enqueue(
            "emails", {"what": "reminder to ada", "note": "delay 2 s"}, delay=2
        )
        say.info(f"enqueued {job_id}  reminder to ada  (delay 2 s)")
        say.info(f"queue.size('emails') = {await self.queue.size('emails')}  (pending + delayed)")
        say.info("a worker starts: queue.consume('emails', send_email, concurrency=1)")

        ran: list[str] = []

        async def send_email(job: Job, ctx: Any) -> None:
            note = job.payload.get("note")
            text = f"ran {job.payload['what']}"
            if note == "priority 10":
                text += "  <- enqueued last, runs first (priority 10)"
            elif note:
                waited = time.time() - job.created_at.timestamp()
                text += f"  <- {note}: ran {waited:.1f} s after it was enqueued"
            say.event(text, "green")
            ran.append(job.id)
            if len(ran) == self.enqueued["emails"]:
                all_ran.set()

        all_ran = anyio.Event()
        await self.consume("emails", send_email)
        await _wait_for(all_ran, "the emails")

    # -- step 4: retries ----------------------------------------------------------------------
    async def retries(self) -> None:
        say = self.say
        say.step(
            "Retries",
            "A flaky job fails twice, then succeeds. The default backoff waits "
            "min(1 s x 2^(n-1), 300 s) after the n-th failure: 1 s, 2 s, 4 s, ... (no jitter).",
        )
        say.code('await queue.enqueue("crm", {"sync": "contact 42"})   # max_attempts: 5')
        failed_at: list[float] = []
        done = anyio.Event()

        async def sync_crm(job: Job, ctx: Any) -> None:
            waited = ""
            if failed_at:
                waited = f" (after waiting {time.monotonic() - failed_at[-1]:.1f} s)"
            if job.attempts <= 2:
                wait = _DEFAULT_BACKOFF.delay(job.attempts, job.id)
                say.event(
                    f"attempt {job.attempts} of {job.max_attempts}{waited}: fails with "
                    f"ConnectionError: CRM timed out -> retry scheduled in {wait:g} s",
                    "yellow",
                )
                failed_at.append(time.monotonic())
                raise ConnectionError("CRM timed out")
            say.event(f"attempt {job.attempts} of {job.max_attempts}{waited}: succeeded", "green")
            done.set()

        await self.consume("crm", sync_crm)
        await self.enqueue("crm", {"sync": "contact 42"})
        await _wait_for(done, "the flaky job")

    # -- steps 5-6: dead-letter queue and operator retry ----------------------------------------
    async def dead_letters(self) -> None:
        say = self.say
        say.step(
            "Dead-letter queue",
            "A job that keeps failing stops after max_attempts and is parked in the "
            "dead-letter queue (DLQ). Nothing retries it from there on its own.",
        )
        say.code(
            'await queue.enqueue("imports", {"file": "bad.csv"}, max_attempts=3,\n'
            '                        backoff={"strategy": "fixed", "delay": 0.5})'
        )
        fixed = False
        done = anyio.Event()
        error = "row 7: invalid date '2024-13-01'"

        async def import_csv(job: Job, ctx: Any) -> None:
            head = f"attempt {job.attempts} of {job.max_attempts}"
            if not fixed:
                if job.attempts < job.max_attempts:
                    fate = f"retry in {_DLQ_BACKOFF.delay(job.attempts, job.id):g} s"
                else:
                    fate = "out of attempts: moved to the dead-letter queue"
                say.event(f"{head}: fails with ValueError: {error} -> {fate}", "red")
                raise ValueError(error)
            say.event(f"{head}: succeeded", "green")
            done.set()

        await self.consume("imports", import_csv)
        job_id = await self.enqueue(
            "imports", {"file": "bad.csv"}, max_attempts=3, backoff=_DLQ_BACKOFF_SPEC
        )
        await _wait_for(self.dead_letters_watch.written, "the dead letter")

        self.term.print()
        say.code('await queue.dlq_list("imports")')
        rows = [
            [
                letter.job_id,
                str(letter.attempts),
                (letter.last_error or "").splitlines()[0] if letter.last_error else "",
                letter.failed_at.strftime("%H:%M:%S"),
            ]
            for letter in await self.queue.dlq_list("imports")
        ]
        table = format_table(
            ["job_id", "attempts", "last_error (first line)", "failed_at (UTC)"],
            rows,
            align="lrll",
            terminal=self.term,
        )
        for line in table.splitlines():
            say.info("  " + line)

        say.step(
            "Operator retry",
            "The bug is fixed; dlq_retry() puts the job back to pending with its attempts reset.",
        )
        fixed = True
        say.code(f'await queue.dlq_retry("{job_id}")')
        retried = await self.queue.dlq_retry(job_id)
        say.event(
            f"dlq_retry -> {retried}; dlq_size('imports') = {await self.queue.dlq_size('imports')}"
        )
        await _wait_for(done, "the retried job")

    # -- step 7: a batch and a progress bar ---------------------------------------------------
    async def bulk(self) -> None:
        say = self.say
        say.step(
            "A busy queue",
            f"{_BULK_JOBS} jobs in one enqueue_many() transaction, drained by a worker "
            f"running 10 handlers at once.",
        )
        say.code('await queue.enqueue_many("reports", payloads)')
        say.code('await queue.consume("reports", render_report, concurrency=10)')
        finished = 0

        async def render_report(job: Job, ctx: Any) -> None:
            nonlocal finished
            await anyio.sleep(random.uniform(0.01, 0.06))  # pretend to work
            finished += 1

        started = time.monotonic()
        await self.queue.enqueue_many("reports", [{"report": n} for n in range(_BULK_JOBS)])
        self.enqueued["reports"] = _BULK_JOBS
        await self.consume("reports", render_report, concurrency=10)
        bar = self.term.progress(_BULK_JOBS, "  reports")
        with anyio.fail_after(_STEP_TIMEOUT):
            while finished < _BULK_JOBS:
                bar.update(finished)
                await anyio.sleep(0.05)
        bar.update(finished, force=True)
        bar.close()
        say.info(f"{_BULK_JOBS} jobs done in {time.monotonic() - started:.1f} s")

    # -- the end ------------------------------------------------------------------------------
    async def summary(self) -> None:
        for consumer in self.consumers.values():
            consumer.cancel()
        for consumer in self.consumers.values():
            with anyio.fail_after(_STEP_TIMEOUT):
                await consumer.wait_stopped()
        rows = []
        for name, consumer in self.consumers.items():
            s = consumer.stats
            rows.append(
                [
                    name,
                    str(self.enqueued.get(name, 0)),
                    str(s.succeeded),
                    str(s.failed),
                    str(s.moved_to_dlq),
                    str(await self.queue.size(name)),
                    str(await self.queue.dlq_size(name)),
                ]
            )
        self.term.print()
        self.say.title("Final counts")
        table = format_table(
            ["queue", "enqueued", "succeeded", "failed attempts", "dead-lettered", "size", "DLQ"],
            rows,
            align="lrrrrrr",
            terminal=self.term,
        )
        for line in table.splitlines():
            self.term.print("  " + line)


async def _run_demo(path: Path, term: Terminal) -> None:
    narrator = _Narrator(term)
    watch = _DeadLetterWatch()
    queue = Queue(backends={"demo": {"protocol": "local", "path": str(path)}}, audit_sinks=[watch])
    async with queue, stopped_by_signals():
        demo = _Demo(queue, narrator, term, watch)
        await demo.ordering()
        await demo.retries()
        await demo.dead_letters()
        await demo.bulk()
        await demo.summary()


def run(args: argparse.Namespace) -> int:
    term = Terminal()
    path, temporary = new_database(args.path, "demo")
    keep = args.keep or temporary is None
    term.print(term.style("blamequeue demo: the life of a job", "bold"))
    where = "kept afterwards" if keep else "deleted afterwards; --keep keeps it"
    term.print(f"Embedded SQLite backend (protocol 'local') at {path} ({where}).")
    try:
        run_on_loop(functools.partial(_run_demo, path, term), args.loop)
    finally:
        if temporary is not None and not args.keep:
            shutil.rmtree(temporary, ignore_errors=True)
    term.print()
    term.print("Every step above is the public API; the database was a plain SQLite file.")
    if keep:
        term.print(f"The database is kept at {path}.")
    term.print("Next: write `async def handler(job, ctx)` in a module and run")
    term.print("  blamequeue worker yourmodule:handler --queue emails")
    return EXIT_OK
