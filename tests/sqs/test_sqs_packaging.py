"""``pip install blamequeue[sqs]`` as a user meets it: wheels of every distribution in a
wheelhouse, then the extra installed into a fresh virtual environment from it (nothing is
published to an index from here; boto3 comes from the package index).  Slow-ish: builds and
installs for real."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

from sqs.moto_server import SqsQueues

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("blamequeue-core", "blamequeue-local", "blamequeue-sqs", ".")


def run(*args: str) -> str:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=600, check=False, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_sqs_extra_installs_from_a_wheelhouse(tmp_path: Path, sqs_queues: SqsQueues) -> None:
    wheelhouse = tmp_path / "wheels"
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
        *isolation, "-w", str(wheelhouse), *(str(ROOT / name) for name in DISTRIBUTIONS),
    )  # fmt: skip
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    run(
        python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "--find-links", str(wheelhouse), "blamequeue[sqs]",
    )  # fmt: skip
    script = (
        "import anyio\n"
        "from blamequeue import Queue\n"
        "async def main():\n"
        f"    queue = Queue(backends={{'s': {{'protocol': 'sqs', 'queue_url': {sqs_queues.url!r},"
        f" 'endpoint_url': {sqs_queues.endpoint!r}}}}}, seal=False)\n"
        "    async with queue:\n"
        "        await queue.enqueue('q', 'hello')\n"
        "        print('size', await queue.size('q'))\n"
        "anyio.run(main)\n"
    )
    assert run(python, "-c", script).strip() == "size 1"
