"""Runs :mod:`unique_producer` in several processes at once (shared by the local and redis
tests of unique-job atomicity; not a test module)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PRODUCER = Path(__file__).with_name("unique_producer.py")


def enqueue_from_processes(
    config: Mapping[str, Any], queue: str, key: str, workdir: Path, *, processes: int, each: int
) -> list[str]:
    """Start ``processes`` producers (alternately on asyncio and trio), let them enqueue
    ``each`` jobs with unique ``key`` at the same moment, and return every id they got."""
    go = workdir / "go"
    children = []
    for n in range(processes):
        out = workdir / f"ids-{n}.json"
        log = (workdir / f"producer-{n}.log").open("wb")
        loop = ("asyncio", "trio")[n % 2]
        args = [json.dumps(dict(config)), queue, key, str(go), str(out), str(each), loop]
        children.append(
            (subprocess.Popen([sys.executable, str(PRODUCER), *args], stdout=log, stderr=log), out)
        )
        log.close()
    ids: list[str] = []
    try:
        deadline = time.monotonic() + 60
        for n, (child, out) in enumerate(children):
            while not out.with_suffix(".ready").exists():
                assert child.poll() is None, (workdir / f"producer-{n}.log").read_text()
                assert time.monotonic() < deadline, "a producer did not start"
                time.sleep(0.01)
        go.touch()
        for n, (child, out) in enumerate(children):
            code = child.wait(timeout=120)
            assert code == 0, (workdir / f"producer-{n}.log").read_text()
            ids += json.loads(out.read_text())
    finally:
        for child, _ in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return ids
