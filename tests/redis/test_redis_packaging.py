"""``pip install blamequeue[redis]`` as a user meets it: wheels of every distribution in a
wheelhouse, then the extra installed into a fresh virtual environment from it (nothing is
published to an index from here).  Slow-ish: builds and installs for real."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("blamequeue-core", "blamequeue-local", "blamequeue-redis", ".")


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_redis_extra_installs_from_a_wheelhouse(tmp_path: Path, redis_url: str) -> None:
    wheelhouse = tmp_path / "wheels"
    # Building in this environment (when it has the build backend) saves an isolated build
    # environment per distribution.
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
        "--find-links", str(wheelhouse), "blamequeue[redis]",
    )  # fmt: skip
    script = (
        "import anyio\n"
        "from blamequeue import Queue\n"
        "async def main():\n"
        f"    queue = Queue(backends={{'r': {{'protocol': 'redis', 'url': {redis_url!r}}}}},"
        " seal=False)\n"
        "    async with queue:\n"
        "        await queue.enqueue('q', 'hello')\n"
        "        print('size', await queue.size('q'))\n"
        "anyio.run(main)\n"
    )
    assert run(python, "-c", script).strip() == "size 1"
