"""How the CLI answers a person: usage errors that say what was expected, "did you mean" for a
mistyped command or option, the same positional arguments in every command, and progress drawn
only for a person watching.  In-process (``main(argv)``)."""

from __future__ import annotations

import io
import os
import select
import sys
from pathlib import Path

import pytest
from cli_helpers import QUEUE, seed, sizes

from blamequeue._cli import build_parser, main
from blamequeue._cli._parser import Parser
from blamequeue._cli._terminal import progress_terminal


def test_a_usage_error_says_what_was_expected_with_an_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "blamequeue worker: error: the following arguments are required: MODULE:OBJECT, "
        "-q/--queue\n"
        "expected: blamequeue worker MODULE:OBJECT --queue QUEUE\n"
        "example: blamequeue worker app.tasks:send_email --queue emails\n"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["wroker"], "blamequeue: error: unknown command 'wroker'; did you mean 'worker' or "),
        (["dlq", "retyr", "job-1"], "blamequeue dlq: error: unknown action 'retyr'; did you "),
        (
            ["worker", "app:handle", "-q", "q", "--concurency", "3"],
            "blamequeue worker: error: unrecognized arguments: --concurency 3 (did you mean "
            "--concurrency?)",
        ),
        (  # a mistyped protocol
            ["bench", "--backend", "reds"],
            "blamequeue bench: error: argument --backend: invalid choice: 'reds'; did you mean "
            "'redis'? (choose from local, memory, redis, sqs)",
        ),
        (  # an option of a mutually exclusive group
            ["size", "q", "--paht", "jobs.db"],
            "blamequeue size: error: unrecognized arguments: --paht jobs.db (did you mean --path?)",
        ),
    ],
)
def test_a_mistyped_command_or_option_gets_a_did_you_mean(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_every_command_puts_its_handler_first_and_calls_a_queue_queue() -> None:
    def walk(parser: Parser) -> list[Parser]:
        return [parser, *(p for child in parser.commands().values() for p in walk(child))]

    with_handlers = []
    for parser in walk(build_parser()):
        synopsis = parser.synopsis()
        usage = parser.format_usage()
        assert "HANDLER" not in usage, parser.prog
        assert " NAME" not in synopsis, parser.prog
        if "MODULE:OBJECT" in synopsis:
            with_handlers.append(parser.prog)
            assert synopsis.index("MODULE:OBJECT") < synopsis.index("QUEUE"), synopsis
    assert with_handlers == ["blamequeue worker", "blamequeue tick"]


def test_retry_all_off_a_terminal_draws_no_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "jobs.db"
    seed(db, dead=2)
    assert main(["dlq", "retry-all", QUEUE, "--path", str(db)]) == 0
    out, err = capsys.readouterr()
    assert out == f"2 dead jobs of {QUEUE!r} back to pending (attempts reset)\n"
    assert err == ""
    assert sizes(db) == (2, 0)


def test_purge_on_a_terminal_draws_its_progress_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "jobs.db"
    seed(db, pending=3)
    controller, terminal = os.openpty()
    screen = b""
    try:
        with open(terminal, "w", closefd=False) as tty:
            monkeypatch.setattr(sys, "stdout", tty)
            monkeypatch.setattr(sys, "stderr", tty)
            assert progress_terminal(json_output=True) is None  # never with --json
            with monkeypatch.context() as piped:  # nor with stdout piped to another program
                piped.setattr(sys, "stdout", io.StringIO())
                assert progress_terminal(json_output=False) is None
            assert main(["purge", QUEUE, "--yes", "--path", str(db)]) == 0
            tty.flush()
        # Everything was written before main returned; the result line ends it.
        while not screen.endswith(b"\r\n") and select.select([controller], [], [], 5)[0]:
            screen += os.read(controller, 65536)
    finally:
        os.close(terminal)
        os.close(controller)
    text = screen.decode()
    assert f"\rpurging queue {QUEUE!r} [" in text  # the activity line, redrawn in place
    # Wiped before the result, which stays alone on its line.
    assert text.endswith(f"\r\x1b[Kpurged 3 live job(s) from queue {QUEUE!r}\r\n")
    assert sizes(db) == (0, 0)
