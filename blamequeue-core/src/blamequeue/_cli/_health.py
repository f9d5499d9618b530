"""The ``health`` and ``metrics`` commands: ``Queue.health`` and ``Queue.metrics`` for an
operator's terminal or a script (``--json``); ``health`` exits 0 / 1 / 2 for healthy /
degraded / unhealthy, so it can serve as a probe command."""

from __future__ import annotations

import argparse

from blamequeue import HealthThresholds, Queue

from ._config import add_queue_command, add_queue_options, with_queue
from ._output import add_json_option, cut, fields_of, print_json, print_table, timestamp
from ._running import Subparsers
from ._terminal import Terminal

__all__ = ["add_parser"]

_EXIT = {"healthy": 0, "degraded": 1, "unhealthy": 2}


_HEALTH_MANUAL = """\
check queues against thresholds: healthy, degraded or unhealthy

Check every queue of the backend: due, delayed, inflight and dead jobs, the
oldest due job's wait, the error rate of the last minutes and live workers,
against the thresholds below.  Exit code 0 healthy, 1 degraded, 2 unhealthy.

examples:
  blamequeue health
  blamequeue health --max-oldest-age 60 --min-workers 1 --json
"""


_METRICS_MANUAL = """\
a queue's throughput, durations, error rate and latest errors

The figures every worker of QUEUE recorded in the backend over the last WINDOW
seconds: attempts succeeded, failed and dead per minute, mean duration, error
rate and the latest errors.

examples:
  blamequeue metrics emails
  blamequeue metrics emails --window 86400 --json
"""


def add_parser(subparsers: Subparsers) -> None:
    health = add_queue_command(subparsers, "health", _HEALTH_MANUAL, run=_health)
    health.add_argument("--max-pending", type=int, metavar="N", help="due jobs per queue")
    health.add_argument(
        "--max-oldest-age",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="the oldest due job's wait (default: 300)",
    )
    health.add_argument(
        "--max-error-rate",
        type=float,
        default=0.25,
        metavar="RATE",
        help="failed attempts / attempts, 0..1 (default: 0.25)",
    )
    health.add_argument("--max-dead", type=int, metavar="N", help="jobs in a queue's DLQ")
    health.add_argument(
        "--min-workers", type=int, metavar="N", help="live workers per queue with due jobs"
    )
    add_json_option(health)
    add_queue_options(health)

    metrics = add_queue_command(subparsers, "metrics", _METRICS_MANUAL, run=_metrics)
    metrics.add_argument("queue", metavar="QUEUE")
    metrics.add_argument(
        "--window", type=float, default=3600.0, help="seconds, 60..86400 (default: 3600)"
    )
    add_json_option(metrics)
    add_queue_options(metrics)


def _health(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        thresholds = HealthThresholds(
            max_pending=args.max_pending,
            max_oldest_age=args.max_oldest_age,
            max_error_rate=args.max_error_rate,
            max_dead=args.max_dead,
            min_workers=args.min_workers,
        )
        report = await queue.health(thresholds, backend=args.backend or queue.default_backend)
        if args.json:
            print_json(report.to_dict())
            return _EXIT[report.status]
        terminal = Terminal()
        terminal.print(f"{report.status} ({len(report.alerts)} alert(s))")
        if report.queues:
            rows = [
                [
                    q.name,
                    q.status,
                    str(q.pending),
                    str(q.delayed),
                    str(q.inflight),
                    str(q.dead),
                    "-" if q.oldest_job_age is None else f"{q.oldest_job_age:.0f}s",
                    "-" if q.error_rate is None else f"{q.error_rate:.0%}",
                    str(q.workers),
                ]
                for q in report.queues
            ]
            headers = ["QUEUE", "STATUS", "DUE", "DELAYED", "INFLIGHT", "DEAD", "WAIT", "ERRORS"]
            print_table(terminal, [*headers, "WORKERS"], rows, align="llrrrrrrr")
        for alert in report.alerts:
            terminal.print(f"{alert.level}: {alert.message}")
        return _EXIT[report.status]

    return with_queue(args, body)


def _metrics(args: argparse.Namespace) -> int:
    async def body(queue: Queue) -> int:
        backend = args.backend or queue.default_backend
        m = await queue.metrics(args.queue, window=args.window, backend=backend)
        if args.json:
            print_json(
                {
                    **fields_of(m, _METRICS),
                    "minutes": [fields_of(minute, _MINUTE) for minute in m.minutes],
                    "recent_errors": [fields_of(error, _ERROR) for error in m.recent_errors],
                }
            )
            return 0
        terminal = Terminal()
        duration = "-" if m.average_duration is None else f"{m.average_duration * 1000:.1f} ms"
        terminal.print(
            f"{m.queue} over {m.window:.0f}s: {m.succeeded} succeeded, {m.failed} failed "
            f"({m.dead} dead), {m.throughput_per_minute:.1f}/min, mean {duration}, "
            f"error rate {m.error_rate:.1%}"
        )
        if m.recent_errors:
            rows = [
                [
                    timestamp(e.at),
                    e.job_id,
                    str(e.attempts),
                    "yes" if e.dead else "",
                    cut(e.error, 60),
                ]
                for e in m.recent_errors[:10]
            ]
            print_table(terminal, ["AT", "JOB", "ATTEMPTS", "DEAD", "ERROR"], rows, align="llrll")
        return 0

    return with_queue(args, body)


#: The keys of ``metrics --json``, in order: the totals, each minute's and each recent error's.
_METRICS = (
    "queue",
    "backend",
    "window",
    "succeeded",
    "failed",
    "dead",
    "throughput_per_minute",
    "average_duration",
    "error_rate",
)
_MINUTE = ("start", "succeeded", "failed", "dead", "average_duration")
_ERROR = ("job_id", "at", "error", "attempts", "dead")
