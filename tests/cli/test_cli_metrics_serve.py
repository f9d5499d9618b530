"""``blamequeue metrics-serve`` as a user runs it (its own process): it starts, answers
``GET /metrics`` with the figures the processes that ran the jobs left in the backend, and
stops on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
from cli_helpers import DEADLINE, QUEUE, seed
from prometheus_client.parser import text_string_to_metric_families


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_metrics_serve_answers_a_scrape(
    tmp_path: Path,
    spawn_cli: Callable[..., subprocess.Popen[str]],
    wait_until: Callable[..., None],
) -> None:
    db = tmp_path / "jobs.db"
    seed(db, pending=2, dead=1, done=1)
    port = _free_port()
    server = spawn_cli("metrics-serve", "--path", str(db), "--port", str(port))
    stderr = tmp_path / "stderr-0.txt"
    wait_until(lambda: "Ctrl-C stops" in stderr.read_text() or server.poll() is not None,
               "the metrics server to start")  # fmt: skip
    assert server.poll() is None, stderr.read_text()
    assert f"http://127.0.0.1:{port}/metrics" in stderr.read_text()
    wait_until(lambda: _listening(port), "the metrics server to listen")
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=DEADLINE)
    assert answer.status_code == 200
    figures = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    labels = (("backend", "default"), ("queue", QUEUE))
    assert figures["blamequeue_jobs_processed_total", labels] == 2
    assert figures["blamequeue_jobs_dead_total", labels] == 1
    assert figures["blamequeue_queue_jobs", (*labels, ("state", "pending"))] == 2
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=DEADLINE) == 0
