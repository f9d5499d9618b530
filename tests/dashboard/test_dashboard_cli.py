"""``blamequeue dashboard`` as a user runs it (its own process): its options, the refusal of
``--read-only-open`` off loopback, a token from the environment never printed, and the Host
and token guards of the server it starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from blamequeue import Queue

TOKEN = "cli-dashboard-token-0123456789"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAMEQUEUE_")}
    return {**env, **extra}


def _database(path: Path) -> Path:
    async def seed() -> None:
        async with Queue(backends={"l": {"protocol": "local", "path": str(path)}}) as queue:
            await queue.enqueue("emails", 1)

    anyio.run(seed)
    return path


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "blamequeue._cli", "dashboard", *args]
    return subprocess.run(command, capture_output=True, text=True, env=_env(**env), timeout=60)


def test_help_names_the_guards() -> None:
    shown = _cli("--help")
    assert shown.returncode == 0
    for option in ("--allowed-host", "--read-only-open", "--host", "--show-payloads"):
        assert option in shown.stdout


def test_read_only_open_off_loopback_is_refused(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        refused = _cli("--path", str(tmp_path / "jobs.db"), "--read-only-open", "--host", host)
        assert refused.returncode == 2, refused.stderr
        assert "--read-only-open" in refused.stderr
        assert "loopback" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert not (tmp_path / "jobs.db").exists()  # refused before anything was opened


def test_a_bad_allowed_host_is_one_clear_line(tmp_path: Path) -> None:
    db = _database(tmp_path / "jobs.db")
    refused = _cli("--path", str(db), "--allowed-host", "http://dash.example/")
    assert refused.returncode == 2
    assert "allowed host" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "dashboard.log"
    db = _database(tmp_path / "jobs.db")
    options = ["--port", str(port), "--read-only-open", "--allowed-host", "dash.example"]
    command = [sys.executable, "-m", "blamequeue._cli", "dashboard", "--path", str(db), *options]
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            command, env=_env(BLAMEQUEUE_DASHBOARD_TOKEN=TOKEN), stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 30
            while "Ctrl-C stops" not in log_path.read_text():
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}", log_path
        finally:
            server.terminate()
            server.wait(timeout=20)


def test_the_server_guards_host_and_token(served: tuple[str, Path]) -> None:
    url, log_path = served
    printed = log_path.read_text()
    assert TOKEN not in printed  # a token from the environment is never printed
    assert "#token=<BLAMEQUEUE_DASHBOARD_TOKEN>" in printed
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url) as client:
        assert client.get("/api/overview").status_code == 200  # open on loopback
        assert client.get("/api/overview", headers={"Host": "evil.example"}).status_code == 421
        allowed = {"Host": "dash.example"}
        assert client.get("/api/overview", headers=allowed).status_code == 401
        assert client.get("/api/overview", headers={**allowed, **auth}).status_code == 200
        write = client.post("/api/queues/q/dlq/purge", json={"queue": "q"},
                            headers={"X-Blamequeue-Action": "1"})  # fmt: skip
        assert write.status_code == 401  # actions still need the token


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_ctrl_c_stops_the_dashboard_cleanly(tmp_path: Path, loop: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "dashboard.log"
    db = _database(tmp_path / "jobs.db")
    options = ["--path", str(db), "--port", str(port), "--loop", loop]
    command = [sys.executable, "-m", "blamequeue._cli", "dashboard", *options]
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, env=_env(), stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while "Running on" not in log_path.read_text():
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.05)
            server.send_signal(signal.SIGINT)
            code = server.wait(timeout=20)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(timeout=20)
    printed = log_path.read_text()
    assert code == 0, printed
    assert "Traceback" not in printed
    assert printed.strip().endswith("blamequeue dashboard: stopped")
