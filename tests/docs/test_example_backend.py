"""The worked example of docs/writing-a-backend.md passes the conformance suite.

The example is its own distribution (docs/examples/blamequeue-example-backend), installed by the
README's test command; its tests run here in a subprocess, from its own directory and with its
own pytest configuration, the way its author would run them.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "blamequeue-example-backend"

# What may be skipped: what the backend's capabilities exclude, and the few sealing tests that
# read the raw store, which the suite can do only for the local and memory stores.
ALLOWED_SKIPS = (
    "backend lacks ",
    "backend declares ",
    "the suite cannot look under a 'jsonfile' store",
)


@pytest.fixture(scope="module")
def example_run() -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("blamequeue_example") is None:
        pytest.fail(
            "the example backend is not installed: "
            "pip install -e ./docs/examples/blamequeue-example-backend"
        )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_the_example_backend_passes_its_conformance_suite(
    example_run: subprocess.CompletedProcess[str],
) -> None:
    assert example_run.returncode == 0, example_run.stdout[-20000:] + example_run.stderr
    assert re.search(r"\d+ passed", example_run.stdout)


def test_the_example_skips_only_what_its_capabilities_exclude(
    example_run: subprocess.CompletedProcess[str],
) -> None:
    reasons = re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", example_run.stdout, re.MULTILINE)
    unexpected = [reason for reason in reasons if not reason.startswith(ALLOWED_SKIPS)]
    assert not unexpected, unexpected
