"""The ``blamequeue`` command: ``main()`` parses the command line and runs one subcommand.

Each subcommand lives in its own module with ``add_parser(subparsers)`` (its options, help and
examples) and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence

from blamequeue import __version__

from . import (
    _audit,
    _bench,
    _cancel,
    _dashboard,
    _demo,
    _dlq,
    _edits,
    _health,
    _inspect,
    _keygen,
    _logs,
    _metrics_serve,
    _ops,
    _pause,
    _result,
    _watch,
    _worker,
)
from ._errors import debug_wanted, log_to_stderr, report
from ._log_format import use_json_logs
from ._parser import Parser
from ._running import EXIT_USAGE

__all__ = ["build_parser", "main"]

_DESCRIPTION = """\
blamequeue: a durable, pluggable job queue for asyncio and trio.

A job you enqueue survives crashes and restarts, is leased by one worker at a time, is retried
with a deterministic backoff, and lands in a dead-letter queue when it runs out of attempts.
New here? Run `blamequeue demo`.
"""

_EPILOG = """\
examples:
  blamequeue demo
      watch enqueue, priority, delay, retries and the dead-letter queue (~10 s)
  blamequeue worker app.tasks:send_email --queue emails --concurrency 8
      run app/tasks.py's send_email(job, ctx) over the "emails" queue until Ctrl-C
  blamequeue bench --backend local --json
      measure throughput, latency and memory on the SQLite backend
  blamequeue enqueue emails '{"to": "ada@example.com"}'
      add a job; prints its id
  blamequeue queues; blamequeue jobs emails --state dead; blamequeue job JOB_ID
      see what the queues hold (every read command takes --json)
  blamequeue dlq retry JOB_ID
      put a dead job back to pending
  blamequeue promote JOB_ID; blamequeue rerun JOB_ID; blamequeue logs JOB_ID
      make a delayed job due now; run a finished job again; print what its handler logged

configuration:
  BLAMEQUEUE_PROTOCOL      local (default) | redis | sqs | memory
  BLAMEQUEUE_LOCAL_PATH    the SQLite file of the local backend (default ./blamequeue.db)
  BLAMEQUEUE_REDIS_URL, BLAMEQUEUE_SQS_QUEUE_URL, BLAMEQUEUE_SEAL_KEYS,
  BLAMEQUEUE_SWEEP_INTERVAL, ...: see the documentation of Queue.from_env
  --config FILE.toml       several backends from a file ([backends.NAME] tables with the keys
                           of Queue(backends=...), plus default_backend and sweep_interval)

exit codes:
  0    success (including a worker stopped gracefully by SIGINT/SIGTERM)
  1    runtime error: printed as "error: [code] message" on stderr (one line; with
       --debug, its traceback too); an exception raised while importing your handler's
       module; also `cancel`, `promote`, `change-delay`, `change-priority`,
       `update-payload` and `rerun` of a job in a state they do not apply to (nothing
       changed)
  2    usage or configuration error: bad option or argument, handler not importable,
       invalid config or config file, unknown --backend, purge without --yes off a terminal
  3    not found: a job id the backend does not hold (`job`, `logs`, `dlq retry`, `cancel`,
       `promote`, `rerun`, ...)
  130  interrupted (Ctrl-C outside a worker's graceful shutdown)

`blamequeue COMMAND --help` shows each command's options and examples.
"""


def _version() -> str:
    return f"blamequeue {__version__} (Python {platform.python_version()})"


def build_parser() -> Parser:
    parser = Parser(
        prog="blamequeue",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print its full traceback too (or set BLAMEQUEUE_DEBUG=1)",
    )
    subparsers = parser.add_subparsers(
        title="commands", metavar="COMMAND", dest="command", required=True
    )
    _demo.add_parser(subparsers)
    _worker.add_parser(subparsers)
    _ops.add_parser(subparsers)
    _cancel.add_parser(subparsers)
    _edits.add_parser(subparsers)
    _inspect.add_parser(subparsers)
    _logs.add_parser(subparsers)
    _watch.add_parser(subparsers)
    _health.add_parser(subparsers)
    _pause.add_parser(subparsers)
    _dashboard.add_parser(subparsers)
    _metrics_serve.add_parser(subparsers)
    _result.add_parser(subparsers)
    _dlq.add_parser(subparsers)
    _bench.add_parser(subparsers)
    _keygen.add_parser(subparsers)
    _audit.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``blamequeue`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argparse's own usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    # Before anything is said: with --log-format json every line on stderr is a JSON object.
    use_json_logs(getattr(args, "log_format", "text") == "json")
    debug = debug_wanted(args.debug)
    log_to_stderr(getattr(args, "log_level", "warning"), debug=debug)
    try:
        code: int = args.run(args)
        return code
    except SystemExit:
        raise
    except BaseException as exc:
        return report(exc, debug=debug)
