"""The ``metrics-serve`` command: serve the Prometheus endpoint (:mod:`blamequeue._prometheus`)
of the configured backends with hypercorn, on asyncio or trio, on loopback unless told
otherwise."""

from __future__ import annotations

import argparse

from blamequeue import metrics_app
from blamequeue._dashboard import is_loopback_host

from ._config import add_queue_command, add_queue_options, build_queue
from ._running import Subparsers, add_loop_option, say
from ._serving import bind_host, require_hypercorn, serve_app, url_of

__all__ = ["add_parser"]


_MANUAL = """\
serve the queues' figures to Prometheus (GET /metrics)

Serve http://HOST:PORT/metrics in the Prometheus text format: per backend and
queue, jobs by state, the oldest due job's wait, live workers, attempts
processed / failed / dead and their durations' histogram, as every worker
sharing the backend recorded them.  Needs hypercorn (pip install
'blamequeue[dashboard]').

examples:
  blamequeue metrics-serve
  blamequeue metrics-serve --config queues.toml --port 9478
  blamequeue metrics-serve --host 0.0.0.0 --backend primary
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "metrics-serve", _MANUAL, run=_run)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9478, help="port (default: 9478)")
    add_loop_option(parser)
    add_queue_options(
        parser, backend_help="only this backend, by its name in --config (default: every one)"
    )


def _run(args: argparse.Namespace) -> int:
    require_hypercorn("the metrics endpoint")
    bind = bind_host(args.host)
    queue = build_queue(args)
    app = metrics_app(queue, backend=args.backend)
    if not is_loopback_host(bind):
        say(
            f"blamequeue metrics-serve: listening on {args.host}, not loopback: anyone who "
            f"can reach it reads your queue names and figures"
        )
    banner = f"blamequeue metrics on {url_of(args.host, args.port)}metrics; Ctrl-C stops"
    return serve_app(
        queue,
        app,
        host=args.host,
        port=args.port,
        loop=args.loop,
        banner=banner,
        name="blamequeue metrics-serve",
    )
