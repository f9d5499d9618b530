"""The live progress display on a real terminal: ``blamequeue demo`` run inside tmux.

Off a terminal the progress bar prints a plain line per quarter (test_cli_demo.py); on one it
must redraw a single line in place, in colour.  tmux gives the command a real pseudo-terminal,
records every byte written to it (``pipe-pane``) and shows the screen a person would see
(``capture-pane``).  CI installs tmux (.ci/run): there, a missing tmux fails the test instead of
skipping it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DEADLINE = 60.0  # the demo itself takes about 10 s


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """``tmux`` on a server of this test's own (its own socket), killed afterwards."""
    executable = shutil.which("tmux")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed; .ci/run installs it (apt-get install tmux)")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    base = [executable, "-S", str(tmp_path / "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def _screen(tmux: list[str]) -> str:
    """What the pane shows now, history included, with its colour codes."""
    result = subprocess.run(
        [*tmux, "capture-pane", "-p", "-e", "-J", "-S", "-500", "-t", "demo"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_demo_draws_a_live_progress_bar_in_place_on_a_terminal(
    tmux: list[str], tmp_path: Path
) -> None:
    env = " ".join(f"unset {name};" for name in os.environ if name.startswith("BLAMEQUEUE_"))
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"cd {shlex.quote(str(tmp_path))}\n"
        "while [ ! -e go ]; do sleep 0.05; done\n"
        f"unset NO_COLOR FORCE_COLOR; {env}\n"
        f"{shlex.quote(sys.executable)} -m blamequeue._cli demo\n"
        'echo "demo exited with $?"\n'
        "sleep 600\n"
    )
    script.chmod(0o755)
    raw = tmp_path / "raw.log"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "demo", "-x", "120", "-y", "50", str(script)],
        check=True,
    )
    # Record every byte the demo writes to its terminal, from before its first one.
    subprocess.run(
        [*tmux, "pipe-pane", "-t", "demo", "-o", f"cat >> {shlex.quote(str(raw))}"], check=True
    )
    (tmp_path / "go").touch()

    deadline = time.monotonic() + DEADLINE
    while "demo exited with" not in (screen := _screen(tmux)):
        assert time.monotonic() < deadline, f"the demo did not finish; the screen:\n{screen}"
        time.sleep(0.2)

    assert "demo exited with 0" in screen
    plain = [_strip_styles(line) for line in screen.splitlines()]
    bars = [line for line in plain if "reports [" in line]
    # Redrawn in place: one line on the screen, finished.
    assert len(bars) == 1, "\n".join(plain)
    assert bars[0].rstrip().endswith("200/200 100%")
    assert any("Final counts" in line for line in plain)
    # In colour on a terminal: the filled part of the bar is green.
    assert "\x1b[32m#" in screen

    # Live: the terminal received the same line redrawn (carriage return) as jobs finished.
    written = raw.read_bytes().decode("utf-8", "replace")
    redraws = [part for part in written.split("\r") if part.startswith("  reports [")]
    counts = {_count(part) for part in redraws}
    assert len(counts) >= 3, f"too few redraws: {sorted(counts)}"
    assert min(counts) < 200
    assert max(counts) == 200


def _strip_styles(line: str) -> str:
    out = []
    i = 0
    while i < len(line):
        if line[i] == "\x1b":
            end = i + 1
            while end < len(line) and not line[end].isalpha():
                end += 1
            i = end + 1
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def _count(redraw: str) -> int:
    """How many jobs a redraw of the bar shows as done (``... 57/200  28%``)."""
    text = _strip_styles(redraw)
    done = text.split("]", 1)[1].split("/", 1)[0]
    return int(done.strip())
