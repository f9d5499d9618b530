"""Every install command of the README and the docs works as written, each in a fresh venv.

How the commands are found and run: tests/install_commands.py.  Slow-ish (a fresh venv and
real installs each, the dependencies from the package index), which is why each command is a
test of its own (the test processes share them out), and why they run only when asked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from install_commands import Command, commands, page_commands, run

COMMANDS = commands()
# About 140 s of test-process time in all (2 processes: ~70 s more for the suite), which the
# CI run's 15 minutes cannot hold today: opt-in, ``BLAMEQUEUE_INSTALL_CHECK=1 .ci/run``.
INSTALLS = pytest.mark.skipif(
    os.environ.get("BLAMEQUEUE_INSTALL_CHECK") != "1",
    reason="the install commands run with BLAMEQUEUE_INSTALL_CHECK=1",
)


def test_the_pages_show_install_commands_of_every_kind() -> None:
    # The finder itself: a change to the Markdown that hid every command would pass vacuously.
    assert len(COMMANDS) >= 10, COMMANDS
    assert any(c.index for c in COMMANDS)
    assert any(not c.index for c in COMMANDS)
    assert any(c.cwd != "." for c in COMMANDS)  # the directive of docs/writing-a-backend.md
    assert not any("[dev]" in " ".join(a) for c in COMMANDS for a in c.steps)  # CI runs that


@INSTALLS
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_the_install_command_works_as_written(
    command: Command, wheelhouse: Path, tmp_path: Path
) -> None:
    failure = run(command, wheelhouse, tmp_path)
    assert failure is None, f"{command}\n{failure}"


def test_the_finder_reads_fences_inline_spans_and_the_directive(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Install with `pip install 'blamequeue[redis]'` or from a clone:\n"
        "\n"
        "```bash\n"
        "python3 -m venv .venv && .venv/bin/pip install ./blamequeue-core \\\n"
        "    ./blamequeue-local  # the embedded backend\n"
        "pip install -U ./blamequeue-testing\n"
        "```\n"
        "<!-- install-check: cwd=docs/examples/blamequeue-example-backend -->\n"
        "```console\n"
        "$ pip install -e '.[test]'\n"
        "```\n"
        "```python\n"
        "# pip install nothing from here\n"
        "```\n"
    )
    found = page_commands(page)
    assert [(c.steps, c.cwd, c.index) for c in found] == [
        ((("install", "blamequeue[redis]"),), ".", True),
        (
            (("install", "./blamequeue-core", "./blamequeue-local"),
             ("install", "-U", "./blamequeue-testing")),
            ".",
            False,
        ),
        ((("install", "-e", ".[test]"),), "docs/examples/blamequeue-example-backend", True),
    ]  # fmt: skip


def test_a_command_that_fails_is_reported_with_what_pip_said(tmp_path: Path) -> None:
    broken = Command((("install", "./no-such-distribution"),), ".", False, "page.md:1")
    failure = run(broken, tmp_path / "no-wheelhouse", tmp_path)  # from the checkout: none used
    assert failure is not None
    assert "no-such-distribution" in failure
