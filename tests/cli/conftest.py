"""Run the CLI the way a user does: a separate process, ``python -m blamequeue._cli``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

RunCli = Callable[..., subprocess.CompletedProcess[str]]

#: Generous: a loaded CI machine is slow; a hang still fails instead of blocking the suite.
DEADLINE = 20.0


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without BLAMEQUEUE_* (a developer's settings must not leak in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAMEQUEUE_")}
    env.pop("FORCE_COLOR", None)
    env.update(extra or {})
    return env


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "blamequeue._cli", *args]


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll ``predicate`` until it holds; fail (not hang) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def wait_until() -> Callable[..., None]:
    return _wait_until


@pytest.fixture
def run_cli(tmp_path: Path) -> RunCli:
    def run(
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli_command(*args),
            capture_output=True,
            text=True,
            cwd=cwd or tmp_path,
            env=cli_env(env),
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def spawn_cli(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start the CLI in the background (stdout and stderr go to files in ``tmp_path``); any
    process still running at the end of the test is killed."""
    started: list[subprocess.Popen[str]] = []

    def spawn(
        *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[str]:
        n = len(started)
        with (
            open(tmp_path / f"stdout-{n}.txt", "w") as out,
            open(tmp_path / f"stderr-{n}.txt", "w") as err,
        ):
            proc = subprocess.Popen(
                cli_command(*args),
                stdout=out,
                stderr=err,
                text=True,
                cwd=cwd or tmp_path,
                env=cli_env(env),
            )
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=DEADLINE)
