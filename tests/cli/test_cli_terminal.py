"""What the CLI draws: colour only where it belongs, a progress bar that suits its stream."""

from __future__ import annotations

import io

from blamequeue._cli._terminal import Terminal, format_table


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_on_a_terminal() -> None:
    term = Terminal(FakeTty(), env={})
    assert term.style("ok", "green") == "\x1b[32mok\x1b[0m"


def test_no_colour_when_no_color_is_set() -> None:
    term = Terminal(FakeTty(), env={"NO_COLOR": "1"})
    assert term.style("ok", "green") == "ok"


def test_no_colour_off_a_terminal() -> None:
    term = Terminal(io.StringIO(), env={})
    assert term.style("ok", "green") == "ok"


def test_force_color_turns_colour_on_off_a_terminal() -> None:
    term = Terminal(io.StringIO(), env={"FORCE_COLOR": "1"})
    assert term.colour


def test_progress_bar_redraws_one_line_on_a_terminal() -> None:
    stream = FakeTty()
    bar = Terminal(stream, env={"NO_COLOR": "1"}).progress(4, "jobs")
    for done in range(5):
        bar.update(done, force=True)
    bar.close()
    text = stream.getvalue()
    assert text.count("\n") == 1
    assert text.count("\r") >= 5
    assert "4/4 100%" in text


def test_progress_bar_prints_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    bar = Terminal(stream, env={}).progress(100, "jobs")
    for done in range(101):
        bar.update(done)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5  # 0 %, 25 %, 50 %, 75 %, 100 %
    assert "\r" not in stream.getvalue()
    assert lines[-1].endswith("100/100 100%")


def test_table_aligns_columns() -> None:
    table = format_table(["name", "n"], [["a", "1"], ["long", "100"]], align="lr")
    assert table.splitlines() == ["name    n", "----  ---", "a       1", "long  100"]
