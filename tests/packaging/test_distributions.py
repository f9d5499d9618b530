"""Each distribution installs and imports on its own, as a user meets it.

Builds into a fresh virtual environment (no access to the test venv's packages); slow-ish
(tens of seconds) but it is the only way to know `pip install ./blamequeue-core` alone works.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    return env_dir / "bin" / "python"


def run(python: Path, *args: str) -> str:
    done = subprocess.run(
        [str(python), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def pip_install(python: Path, *targets: str) -> None:
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *targets)


def test_core_installs_alone_then_local_adds_the_sqlite_backend(fresh_python: Path) -> None:
    pip_install(fresh_python, str(ROOT / "blamequeue-core"))
    script = (
        "import blamequeue, blamequeue.abc, blamequeue.errors\n"
        "from blamequeue import Queue, QueueError\n"
        "try:\n"
        "    Queue(backends={'a': {'protocol': 'local'}})\n"
        "except QueueError as e:\n"
        "    print(e.code, e.message)\n"
    )
    out = run(fresh_python, "-c", script)
    assert out.startswith("queue/invalid-config")
    assert "'local'" in out

    pip_install(fresh_python, str(ROOT / "blamequeue-local"))
    out = run(
        fresh_python,
        "-c",
        "from blamequeue import Queue; import blamequeue_local;"
        "Queue(backends={'a': {'protocol': 'local'}}); print('local ok')",
    )
    assert "local ok" in out
    assert "0.1.0" in run(fresh_python, "-m", "blamequeue._cli", "--version")


def test_testing_distribution_brings_the_memory_protocol(fresh_python: Path) -> None:
    pip_install(fresh_python, str(ROOT / "blamequeue-core"), str(ROOT / "blamequeue-testing"))
    out = run(
        fresh_python,
        "-c",
        "from blamequeue import Queue; from blamequeue_testing import VirtualClock;"
        "Queue(backends={'m': {'protocol': 'memory'}}, clock=VirtualClock()); print('memory ok')",
    )
    assert "memory ok" in out
    # The throwaway servers import redis-py, boto3 and moto only when used; none is installed.
    out = run(
        fresh_python,
        "-c",
        "import sys; import blamequeue_testing.servers as s; s.free_port();"
        "print(sorted(set(sys.modules) & {'redis', 'boto3', 'moto', 'blamequeue_redis'}))",
    )
    assert out.strip() == "[]"


def test_the_meta_distribution_pulls_core_and_local(tmp_path: Path) -> None:
    env_dir = tmp_path / "meta"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip_install(python, str(ROOT / "blamequeue-core"), str(ROOT / "blamequeue-local"), str(ROOT))
    out = run(python, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in out.splitlines()}
    assert {"blamequeue", "blamequeue-core", "blamequeue-local"} <= names
    assert "blamequeue-testing" not in names
