"""The read-only commands: ``size``, ``jobs``, ``job``, ``queues``, ``workers``, ``backends`` and
``plugins``.  Each prints a table for people or, with ``--json``, one JSON document."""

from __future__ import annotations

import argparse
import functools
import json
from datetime import datetime
from typing import Any

import attrs

from blamequeue import JobInfo, Queue, QueueInfo, WorkerInfo
from blamequeue._clock import to_datetime
from blamequeue._deferred import DEFERRED_STATUS, is_deferred
from blamequeue._inspection import MAX_PAGE
from blamequeue._plugins import PluginInfo, load_registry
from blamequeue.abc import JOB_STATES, Capabilities

from ._config import (
    add_queue_argument,
    add_queue_command,
    add_queue_options,
    chosen_backends,
    per_backend,
    with_queue,
)
from ._output import (
    add_json_option,
    ago,
    cut,
    fields_of,
    job_document,
    key_values,
    print_json,
    print_json_or_table,
    print_table,
    queue_document,
    show_payload,
    show_progress,
    timestamp,
    wide,
    worker_document,
)
from ._running import EXIT_NOT_FOUND, EXIT_OK, Subparsers, positive_int, say
from ._terminal import Terminal

__all__ = ["add_parser", "add_size_options"]


def _limit(text: str) -> int:
    value = positive_int(text)
    if value > MAX_PAGE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PAGE}, got {value}")
    return value


_SIZE_MANUAL = """\
how many live jobs a queue holds (pending, delayed, running, parked)

Print how many live jobs QUEUE holds: pending (delayed ones too), inflight and
parked; done and dead jobs are not counted (see `blamequeue dlq size`).

examples:
  blamequeue size emails
  blamequeue size emails --json              # {"queue": ..., "size": 12, ...}
  blamequeue size emails --path /var/lib/app/jobs.db
"""


_JOBS_MANUAL = """\
list a queue's jobs by state, a page at a time

List the jobs of QUEUE: pending first, then inflight, parked, done (while retained)
and dead, each in enqueue order, --limit at a time.  When more follow, the last line
gives the command for the next page (--cursor).

examples:
  blamequeue jobs emails
  blamequeue jobs emails --state dead --limit 20
  blamequeue jobs emails --cursor pending:1234      # the next page
  blamequeue jobs emails --json | jq '.jobs[].id'
"""


_JOB_MANUAL = """\
show one job: its state, payload, attempts, progress and last error

Show the job JOB_ID wherever it is (pending, inflight, parked, done while retained,
or dead), with the last progress its handler reported.  Exit code 3 when no backend
holds it; `blamequeue logs JOB_ID` prints its log.

examples:
  blamequeue job job-01J0ZK5V3G9YB6R2W8X4T1QH7C
  blamequeue job job-01J0ZK5V3G9YB6R2W8X4T1QH7C --json | jq .state
"""


_QUEUES_MANUAL = """\
list the queues that hold jobs, with a count per state

List every queue holding jobs, on every configured backend (or --backend), with how
many of its jobs are pending, inflight, parked, done (retained) and dead.

examples:
  blamequeue queues
  blamequeue queues --json
"""

_WORKERS_MANUAL = """\
list the live workers (consumers) and their last heartbeat

List the consumers running now, in any process or host: each registers itself in the
backend and heartbeats every 5 s; one silent for 15 s is not listed.

examples:
  blamequeue workers
  blamequeue workers --json | jq '.workers | length'
"""

_BACKENDS_MANUAL = """\
list the configured backends, their protocol and circuit-breaker state

Open every configured backend and show its protocol, its circuit breaker (closed,
open, half-open) and what it can do.  Fails (exit 1) when a backend cannot be opened.

examples:
  blamequeue backends
  blamequeue backends --config queues.toml --json
"""

_PLUGINS_MANUAL = """\
list the loaded plugins: what they register and their distribution

List the plugins loaded from the 'blamequeue' entry-point group (the built-in
backends come in the same way), what each registers, and the distribution and
version it comes from.  BLAMEQUEUE_PLUGINS / BLAMEQUEUE_DISABLE_PLUGINS select them.

examples:
  blamequeue plugins
  BLAMEQUEUE_DISABLE_PLUGINS=redis blamequeue plugins --json
"""


def add_parser(subparsers: Subparsers) -> None:
    size = add_queue_command(subparsers, "size", _SIZE_MANUAL)
    add_size_options(size, dead=False)

    jobs = add_queue_command(subparsers, "jobs", _JOBS_MANUAL, run=_jobs)
    add_queue_argument(jobs)
    jobs.add_argument(
        "--state", choices=JOB_STATES, help="only jobs in this state (default: every state)"
    )
    jobs.add_argument(
        "--limit",
        type=_limit,
        default=50,
        metavar="N",
        help=f"jobs per page, 1 to {MAX_PAGE} (default: 50)",
    )
    jobs.add_argument(
        "--cursor", metavar="CURSOR", help="continue after the page that printed this cursor"
    )
    add_json_option(jobs)
    add_queue_options(jobs)

    job = add_queue_command(subparsers, "job", _JOB_MANUAL, run=_job)
    job.add_argument("job_id", metavar="JOB_ID", help="the id enqueue returned (job-...)")
    add_json_option(job)
    add_queue_options(job, backend_help="look only in this backend (default: every backend)")

    for name, manual, run in [
        ("queues", _QUEUES_MANUAL, _queues),
        ("workers", _WORKERS_MANUAL, _workers),
        ("backends", _BACKENDS_MANUAL, _backends),
    ]:
        listing = add_queue_command(subparsers, name, manual, run=run)
        add_json_option(listing)
        add_queue_options(listing, backend_help="only this backend (default: every backend)")

    plugins = add_queue_command(subparsers, "plugins", _PLUGINS_MANUAL, run=_plugins)
    add_json_option(plugins)


def add_size_options(parser: argparse.ArgumentParser, *, dead: bool) -> None:
    """What ``size`` and ``dlq size`` (``dead``) take: QUEUE, ``--json`` and the queue's."""
    add_queue_argument(parser)
    add_json_option(parser)
    add_queue_options(parser)
    parser.set_defaults(run=_size, dead=dead)


# -- helpers ------------------------------------------------------------------------------------
def _job_rows(infos: list[JobInfo]) -> list[list[str]]:
    payload_width, error_width = (40, 50) if wide() else (24, 30)
    return [
        [
            info.job.id,
            info.state,
            str(info.job.priority),
            f"{info.job.attempts}/{info.job.max_attempts}",
            timestamp(info.job.available_at),
            cut(
                "<unreadable>" if info.payload_error else show_payload(info.job.payload),
                payload_width,
            ),
            cut(info.job.last_error, error_width),
        ]
        for info in infos
    ]


# -- commands -----------------------------------------------------------------------------------
def _size(args: argparse.Namespace) -> int:
    """``size`` or ``dlq size`` (``args.dead``): print how many jobs, or JSON."""

    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        count = queue.dlq_size if args.dead else queue.size
        size = await count(args.queue, backend=backend)
        if args.json:
            print_json({"queue": args.queue, "backend": backend, "size": size})
        else:
            print(size)
        return EXIT_OK

    return with_queue(args, body)


def _jobs(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        page = await queue.list_jobs(
            args.queue, state=args.state, limit=args.limit, cursor=args.cursor, backend=backend
        )
        which = f"{args.state} jobs" if args.state else "jobs"
        drawn = print_json_or_table(
            args.json,
            {
                "queue": args.queue,
                "backend": backend,
                "state": args.state,
                "jobs": [job_document(info) for info in page.jobs],
                "next_cursor": page.next_cursor,
            },
            ["ID", "STATE", "PRI", "ATTEMPTS", "AVAILABLE (UTC)", "PAYLOAD", "LAST ERROR"],
            _job_rows(page.jobs),
            align="llrllll",
            empty=f"no {which} in queue {args.queue!r} (backend {backend!r})",
        )
        if drawn and page.next_cursor is not None:
            more = [f"blamequeue jobs {args.queue}"]
            if args.state:
                more.append(f"--state {args.state}")
            if args.limit != 50:
                more.append(f"--limit {args.limit}")
            more.append(f"--cursor {page.next_cursor}")
            Terminal().print(f"more {which}: {' '.join(more)}")
        return EXIT_OK

    return with_queue(args, body)


def _job(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        found = await per_backend(queue, args, functools.partial(_job_info, queue, args.job_id))
        infos = [info for _name, info in found if info is not None]
        if not infos:
            where = ", ".join(repr(name) for name, _info in found)
            say(
                f"error: no job {args.job_id} on backend {where} (a done job is kept only "
                f"for the backend's retain_done seconds)"
            )
            return EXIT_NOT_FOUND
        info = infos[0]
        if args.json:
            print_json(job_document(info))
            return EXIT_OK
        job = info.job
        terminal = Terminal()
        payload = (
            f"<unreadable: {info.payload_error}>"
            if info.payload_error
            else _pretty_json(job.payload)
        )
        key_values(
            terminal,
            {
                "id": job.id,
                "queue": job.queue,
                "backend": info.backend,
                "state": terminal.style(info.state, _STATE_STYLE.get(info.state, "bold")),
                "priority": str(job.priority),
                "attempts": f"{job.attempts} of {job.max_attempts}",
                "created": timestamp(job.created_at),
                "available": timestamp(job.available_at),
                "finished": timestamp(info.finished_at),
                "trace_id": job.trace_id or "-",
                "classification": job.classification or "-",
                "flow_id": job.flow_id or "-",
                "depends_on": ", ".join(info.depends_on) or "-",
                "progress": show_progress(info.progress),
                "payload": payload,
                "last_error": job.last_error or "-",
            },
        )
        return EXIT_OK

    return with_queue(args, body)


_STATE_STYLE = {
    "done": "green",
    "dead": "red",
    "inflight": "cyan",
    "parked": "dim",
    "cancelled": "yellow",
}


async def _job_info(queue: Queue, job_id: str, backend: str) -> JobInfo | None:
    return await queue.job_info(job_id, backend=backend)


def _pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


#: The states ``queues`` shows a count of, in its columns' order.
_COUNTED = ("pending", "inflight", "parked", "done", "dead", "cancelled")


def _queues(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        found = await per_backend(queue, args, lambda name: queue.queues(backend=name))
        infos: list[QueueInfo] = [info for _name, infos in found for info in infos]
        print_json_or_table(
            args.json,
            {"queues": [queue_document(info) for info in infos]},
            ["BACKEND", "QUEUE", *(state.upper() for state in _COUNTED)],
            [
                [info.backend, info.name, *(str(getattr(info, state)) for state in _COUNTED)]
                for info in infos
            ],
            align="llrrrrrr",
            empty="no queue holds jobs",
        )
        return EXIT_OK

    return with_queue(args, body)


def _workers(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        found = await per_backend(queue, args, lambda name: queue.workers(backend=name))
        infos: list[WorkerInfo] = [info for _name, infos in found for info in infos]
        now = to_datetime(queue.clock.now())
        print_json_or_table(
            args.json,
            {"workers": [worker_document(info) for info in infos]},
            [
                "WORKER",
                "BACKEND",
                "QUEUE",
                "HOST",
                "PID",
                "CONCURRENCY",
                "RUNNING",
                "SUCCEEDED",
                "FAILED",
                "STARTED",
                "HEARTBEAT",
            ],
            [_worker_row(info, now) for info in infos],
            align="llllrrrrrll",
            empty="no live workers",
        )
        return EXIT_OK

    return with_queue(args, body)


def _worker_row(info: WorkerInfo, now: datetime) -> list[str]:
    counts = (info.pid, info.concurrency, info.in_flight, info.succeeded, info.failed)
    return [
        *(info.id, info.backend, info.queue, info.host),
        *map(str, counts),
        ago(info.started_at, now),
        ago(info.last_heartbeat, now),
    ]


def _capabilities(protocol: str) -> Capabilities:
    registration = load_registry().protocols.get(protocol)
    caps = getattr(getattr(registration, "value", None), "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


def _flags(caps: Capabilities) -> list[str]:
    return [field.name for field in attrs.fields(Capabilities) if getattr(caps, field.name) is True]


def _backends(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        chosen = set(chosen_backends(queue, args))
        statuses = [status for status in queue.list_backends() if status.name in chosen]
        rows: list[dict[str, Any]] = []
        for status in statuses:
            caps = _capabilities(status.protocol)
            rows.append(
                {
                    "name": status.name,
                    "protocol": status.protocol,
                    "breaker_state": status.breaker_state,
                    "default": status.name == queue.default_backend,
                    "capabilities": _flags(caps),
                    "async_libraries": sorted(caps.async_libraries),
                }
            )
        if args.json:
            print_json({"backends": rows})
            return EXIT_OK
        terminal = Terminal()
        print_table(
            terminal,
            ["NAME", "PROTOCOL", "BREAKER", "DEFAULT", "CAPABILITIES"],
            [
                [
                    row["name"],
                    row["protocol"],
                    row["breaker_state"],
                    "yes" if row["default"] else "",
                    ", ".join(row["capabilities"]),
                ]
                for row in rows
            ],
            align="lllll",
        )
        return EXIT_OK

    return with_queue(args, body)


def _plugins(args: argparse.Namespace) -> int:
    registry = load_registry()

    def status(info: PluginInfo) -> str:
        """Whether it works: a protocol named by the spec but not implemented yet says so."""
        protocols = [registry.protocols.get(name) for name in info.protocols]
        if any(is_deferred(getattr(found, "value", None)) for found in protocols):
            return DEFERRED_STATUS
        return "ok"

    print_json_or_table(
        args.json,
        {
            "plugins": [
                {
                    **fields_of(info, ("name", "distribution", "version")),
                    **{kind: list(getattr(info, kind)) for kind in _REGISTERED},
                    "status": status(info),
                }
                for info in registry.plugins
            ],
            "failed": dict(registry.failed),
        },
        [
            "PLUGIN",
            *(kind.replace("_", " ").upper() for kind in _REGISTERED),
            "DISTRIBUTION",
            "VERSION",
            "STATUS",
        ],
        [
            [
                info.name,
                *(", ".join(getattr(info, kind)) or "-" for kind in _REGISTERED),
                info.distribution or "-",
                info.version or "-",
                status(info),
            ]
            for info in registry.plugins
        ],
        align="llllllll",
        empty="no plugins loaded (check BLAMEQUEUE_PLUGINS / BLAMEQUEUE_DISABLE_PLUGINS)",
    )
    if not args.json:
        for name, error in sorted(registry.failed.items()):
            say(f"warning: plugin {name!r} failed to load: {error}")
    return EXIT_OK


#: What a plugin can register, in the order ``plugins`` shows it.
_REGISTERED = ("protocols", "audit_sinks", "sealers", "dev_servers")
