"""blamequeue and Bee-Queue side by side on one temporary redis-server (see README.md).

Each round measures, for each system, single enqueue (jobs awaited one at a time), bulk enqueue
(chunks of 1,000) and processed jobs/s (one worker process, concurrency 50, no-op handler, from
its first job's start to its last job's completion, over jobs enqueued in bulk before the worker
started).  Every measurement runs in a fresh process on a flushed server; the rounds alternate
which system goes first.  The table gives, per figure, the median of the rounds for each system,
their range, and the ratio of the medians (blamequeue / Bee-Queue)::

    .venv/bin/python docs/examples/bee-queue-benchmark/run.py
    .venv/bin/python docs/examples/bee-queue-benchmark/run.py --rounds 1 --jobs 2000 --json
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

import blamequeue
from blamequeue_testing.servers import RedisServer

HERE = Path(__file__).resolve().parent
SYSTEMS = ("blamequeue", "bee-queue")
NAMES = {"blamequeue": "blamequeue", "bee-queue": "Bee-Queue"}
#: (key, the mode of bee.js and blamequeue_side.py, the table's label)
FIGURES = (
    ("enqueue_single", "enqueue-single", "single enqueue"),
    ("enqueue_bulk", "enqueue-bulk", "bulk enqueue (chunks of 1,000)"),
    ("processed", "process", "processed (concurrency 50)"),
)
#: Seconds one measuring process may take before the run gives up.
CHILD_TIMEOUT = 900
NODE_MAJOR = 20  # bee-queue 2.0.0 needs Node 20 or newer


class BenchError(Exception):
    """The run cannot go on; the message says why and what to do."""


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=5, metavar="R", help="rounds (default: 5)"
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=20_000,
        metavar="N",
        help="jobs of the bulk enqueue and processed figures (default: 20000)",
    )
    parser.add_argument(
        "--single-jobs",
        type=positive_int,
        default=5_000,
        metavar="N",
        help="jobs of the single enqueue figure (default: 5000)",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="blamequeue's event loop (default: asyncio)",
    )
    parser.add_argument(
        "--bee-defaults",
        action="store_true",
        help="run Bee-Queue with every setting at its default (README.md: Settings)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def say(message: str) -> None:
    """Progress, on standard error: standard output holds only the result."""
    print(message, file=sys.stderr, flush=True)


def node_version() -> str:
    node = shutil.which("node")
    if node is None:
        raise BenchError(
            f"Bee-Queue's side needs Node.js {NODE_MAJOR} or newer and npm on PATH "
            "(https://nodejs.org, or e.g. apt-get install nodejs npm)"
        )
    version = subprocess.run(
        [node, "--version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < NODE_MAJOR:
        raise BenchError(f"bee-queue 2.0.0 needs Node.js {NODE_MAJOR} or newer; node is {version}")
    return version


def install_bee_queue() -> str:
    """``npm ci`` in this directory when ``node_modules`` is missing; Bee-Queue's version."""
    if not (HERE / "node_modules").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            raise BenchError(
                "npm is not on PATH: it installs Bee-Queue (npm ci in this folder); "
                "install npm with Node.js (https://nodejs.org, or e.g. apt-get install npm)"
            )
        say(f"installing Bee-Queue: npm ci in {HERE}")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, stdout=sys.stderr, check=False
        )
        if done.returncode != 0:
            raise BenchError(f"npm ci in {HERE} failed (exit status {done.returncode})")
    manifest = HERE / "node_modules" / "bee-queue" / "package.json"
    return str(json.loads(manifest.read_text())["version"])


def command(system: str, mode: str, jobs: int, url: str, args: argparse.Namespace) -> list[str]:
    if system == "blamequeue":
        script = str(HERE / "blamequeue_side.py")
        return [sys.executable, script, mode, str(jobs), "--url", url, "--loop", args.loop]
    defaults = ["--defaults"] if args.bee_defaults else []
    return ["node", str(HERE / "bee.js"), mode, str(jobs), "--url", url, *defaults]


def run_child(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one measuring process; its figure (the one JSON line it prints)."""
    try:
        done = subprocess.run(
            argv, env=env, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(argv)} took over {CHILD_TIMEOUT} s") from None
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)} failed (exit status {done.returncode}); see above")
    lines = done.stdout.strip().splitlines()
    if len(lines) != 1:
        raise BenchError(f"{' '.join(argv)} printed {done.stdout!r}, not one JSON line")
    figure: dict[str, Any] = json.loads(lines[0])
    return figure


def measure(
    client: redis.Redis,
    url: str,
    env: dict[str, str],
    system: str,
    mode: str,
    jobs: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One figure of one system, in a fresh process on a flushed server.  ``process`` first
    fills the queue with ``jobs`` jobs (the system's own bulk enqueue, in a process of its
    own), then starts the one worker process that is measured."""
    client.flushall()
    if mode == "process":
        run_child(command(system, "enqueue-bulk", jobs, url, args), env)
    return run_child(command(system, mode, jobs, url, args), env)


def summary(runs: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(runs), 1),
        "min": round(min(runs), 1),
        "max": round(max(runs), 1),
        "runs": runs,
    }


def bench(args: argparse.Namespace, versions: dict[str, str]) -> dict[str, Any]:
    jobs = {"enqueue_single": args.single_jobs, "enqueue_bulk": args.jobs, "processed": args.jobs}
    # A seal key given as a user gives one (what `blamequeue keygen` prints): sealing is on.
    seal_key = base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    env = {**os.environ, "BLAMEQUEUE_SEAL_KEYS": f"bench:{seal_key}"}
    runs: dict[str, dict[str, list[float]]] = {
        key: {system: [] for system in SYSTEMS} for key, _, _ in FIGURES
    }
    with RedisServer() as server, redis.Redis.from_url(server.url) as client:
        versions["redis-server"] = str(client.info("server")["redis_version"])
        for number in range(args.rounds):
            order = SYSTEMS if number % 2 == 0 else SYSTEMS[::-1]
            for key, mode, label in FIGURES:
                for system in order:
                    say(f"round {number + 1}/{args.rounds}: {NAMES[system]}, {label}")
                    figure = measure(client, server.url, env, system, mode, jobs[key], args)
                    runs[key][system].append(float(figure["jobs_per_s"]))
    figures: dict[str, Any] = {}
    for key, _, label in FIGURES:
        both = {system: summary(runs[key][system]) for system in SYSTEMS}
        ratio = both["blamequeue"]["median"] / both["bee-queue"]["median"]
        figures[key] = {"label": label, "jobs": jobs[key], **both, "ratio": round(ratio, 2)}
    return {
        "versions": versions,
        "settings": {
            "rounds": args.rounds,
            "jobs": args.jobs,
            "single_jobs": args.single_jobs,
            "chunk": 1000,
            "concurrency": 50,
            "loop": args.loop,
            "bee_defaults": args.bee_defaults,
            "sealing": True,
        },
        "unit": "jobs/s",
        "figures": figures,
    }


def table(result: dict[str, Any]) -> str:
    def cell(figure: dict[str, Any]) -> str:
        return f"{figure['median']:,.0f} ({figure['min']:,.0f} to {figure['max']:,.0f})"

    versions, settings = result["versions"], result["settings"]
    rows = [["figure", "jobs", "blamequeue", "Bee-Queue", "ratio"]]
    for figure in result["figures"].values():
        rows.append(
            [
                figure["label"],
                f"{figure['jobs']:,}",
                cell(figure["blamequeue"]),
                cell(figure["bee-queue"]),
                f"{figure['ratio']:.2f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            text.ljust(width) if i == 0 else text.rjust(width)
            for i, (text, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    head = (
        f"blamequeue {versions['blamequeue']} (Python {versions['python']}, {settings['loop']}, "
        f"sealing on) vs Bee-Queue {versions['bee-queue']} (Node {versions['node']}"
        f"{', all defaults' if settings['bee_defaults'] else ''}), "
        f"redis-server {versions['redis-server']} on loopback, "
        f"{settings['rounds']} round{'s' if settings['rounds'] > 1 else ''}"
    )
    foot = "jobs/s: median of the rounds (min to max); ratio: blamequeue / Bee-Queue (medians)"
    return "\n".join([head, *lines, foot])


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    try:
        versions = {
            "blamequeue": blamequeue.__version__,
            "python": platform.python_version(),
            "node": node_version(),
            "bee-queue": install_bee_queue(),
        }
        result = bench(args, versions)
    except (BenchError, blamequeue.QueueError) as exc:  # QueueError: redis-server did not start
        say(f"run.py: {exc}")
        return 1
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
