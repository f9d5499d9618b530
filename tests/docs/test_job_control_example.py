"""docs/job-control.md's example (docs/examples/job_control.py) runs as shown, on both loops."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "job_control.py"


@pytest.mark.anyio
async def test_the_job_control_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(EXAMPLE))
    await module["main"]()
    out = capsys.readouterr().out.splitlines()
    assert "deferred=1" in out[0]
    assert "succeeded=1" in out[1]
    assert out[2] == "done 1 100.0"
    assert [line.split(" ", 2)[1:] for line in out[3:5]] == [["1", "charging order 42"]] * 2
    assert "succeeded=1" in out[-1]
