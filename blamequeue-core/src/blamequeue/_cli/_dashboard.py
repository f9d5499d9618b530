"""The ``dashboard`` command: serve the web dashboard (:mod:`blamequeue._dashboard`) for the
configured backend with hypercorn, on asyncio or trio, on loopback unless told otherwise.

Every request needs the token (``BLAMEQUEUE_DASHBOARD_TOKEN``, or one made up for this run and
printed in the address's fragment, which the browser keeps to itself) unless
``--read-only-open`` lets loopback clients read without it."""

from __future__ import annotations

import argparse
import os
import secrets

from blamequeue._dashboard import dashboard_app, is_loopback_host

from ._config import add_queue_command, add_queue_options, build_queue
from ._output import fields_of
from ._running import Subparsers, UsageError, add_loop_option, say
from ._serving import bind_host, require_hypercorn, serve_app, url_of

__all__ = ["add_parser"]


_MANUAL = """\
serve the web dashboard (queues, jobs, DLQ, flows, batches, workers)

Serve the web dashboard on http://HOST:PORT.  Reading and acting (DLQ retry /
retry-all / purge) need the token: BLAMEQUEUE_DASHBOARD_TOKEN, or else one made
up for this run and printed in the address to open (after '#', which the browser
never sends to the server).  Only requests whose Host is a loopback name or one
given with --allowed-host are answered.  Payloads are shown only with
--show-payloads and the token.  Needs hypercorn (pip install 'blamequeue[dashboard]').

examples:
  blamequeue dashboard
  blamequeue dashboard --read-only-open
  BLAMEQUEUE_DASHBOARD_TOKEN=... blamequeue dashboard --port 9000 --show-payloads
  blamequeue dashboard --host 0.0.0.0 --allowed-host queues.internal.example
"""


def add_parser(subparsers: Subparsers) -> None:
    parser = add_queue_command(subparsers, "dashboard", _MANUAL, run=_run)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    parser.add_argument(
        "--show-payloads",
        dest="allow_payloads",
        action="store_true",
        help="show payloads to token holders",
    )
    parser.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        metavar="NAME",
        action="append",
        default=[],
        help="a host name requests may use besides loopback ones (repeatable), e.g. the "
        "name a proxy or your browser reaches this machine by",
    )
    parser.add_argument(
        "--read-only-open",
        action="store_true",
        help="let loopback clients read without the token (actions still need it); "
        "only with a loopback --host",
    )
    parser.add_argument(
        "--audit-file",
        metavar="FILE",
        help="a JsonlAuditSink file: each job's audit events join its timeline",
    )
    add_loop_option(parser)
    add_queue_options(parser)


def _run(args: argparse.Namespace) -> int:
    require_hypercorn("the dashboard")
    bind = bind_host(args.host)
    loopback = is_loopback_host(bind)
    if args.read_only_open and not loopback:
        raise UsageError(
            f"--read-only-open lets anyone who can reach the port read your queues without "
            f"the token, so it is refused with --host {args.host} (not loopback): bind to "
            f"127.0.0.1, ::1 or localhost, or drop --read-only-open and use the token"
        )
    from_env = os.environ.get("BLAMEQUEUE_DASHBOARD_TOKEN") or None
    token = from_env or secrets.token_urlsafe(32)
    queue = build_queue(args)
    options = ("allow_payloads", "backend", "audit_file", "allowed_hosts", "read_only_open")
    app = dashboard_app(queue, token=token, **fields_of(args, options))
    if not loopback:
        say(
            f"blamequeue dashboard: WARNING: listening on {args.host}, not loopback: anyone "
            f"who can reach it and holds the token sees your queues; serve it over TLS "
            f"(behind a proxy). Requests are answered only for loopback names and "
            f"{', '.join(args.allowed_hosts) or '(no --allowed-host given)'}"
        )
    url = url_of(args.host, args.port)
    if from_env:
        # The operator has it; a token never goes to the terminal (or a log that keeps it).
        opening = f"{url} (open {url}#token=<BLAMEQUEUE_DASHBOARD_TOKEN> or type it in the page)"
    else:
        opening = f"{url}#token={token} (a token made up for this run)"
    mode = (
        "reads open on loopback, actions need the token"
        if args.read_only_open
        else ("the token is needed to read and to act")
    )
    banner = f"blamequeue dashboard on {opening}; {mode}; Ctrl-C stops"
    return serve_app(
        queue,
        app,
        host=args.host,
        port=args.port,
        loop=args.loop,
        banner=banner,
        name="blamequeue dashboard",
    )
