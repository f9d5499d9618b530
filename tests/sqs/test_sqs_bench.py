"""``blamequeue bench --backend sqs`` reports SQS requests per job (issue 5: at most 0.35 with a
backlog; the floor is 0.3).  Speeds are never asserted: they belong to the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_bench_reports_sqs_requests_per_job_with_a_backlog(sqs_endpoint: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "blamequeue._cli",
            "bench",
            "--backend",
            "sqs",
            "--endpoint-url",
            sqs_endpoint,
            "--jobs",
            "100",
            "--samples",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    requests = report["sqs_requests"]
    assert requests["jobs"] == 100
    assert requests["by_action"]["SendMessageBatch"] == 10
    assert requests["per_job"] <= 0.35
    assert report["processed"]["jobs"] == 100


def test_bench_on_sqs_refuses_options_of_other_backends(sqs_endpoint: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "blamequeue._cli", "bench", "--backend", "sqs", "--path", "x.db"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--endpoint-url" in done.stderr
