"""docs/tracing.md's example (docs/examples/tracing.py) prints the trace it describes.  In a
process of its own: it sets the process's tracer and meter providers, as an application does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tracing.py"


def test_the_tracing_example_prints_the_request_send_and_process_spans() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "POST /orders",
        "  send charges",
        "    process charges  [ConnectionError: card service unreachable]",
        "      call the card service  [ConnectionError: card service unreachable]",
        "    process charges",
        "      call the card service",
        "blamequeue.jobs.failed 1",
        "blamequeue.jobs.processed 1",
    ]
