"""``blamequeue`` itself: version, help that teaches, exit codes for usage errors."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

import blamequeue
from blamequeue._cli import _keygen, main

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_version_prints_the_package_version(run_cli: RunCli) -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"blamequeue {blamequeue.__version__}")


def test_main_help_lists_the_commands_examples_and_exit_codes(run_cli: RunCli) -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for text in ("demo", "worker", "bench", "examples:", "exit codes:", "130", "BLAMEQUEUE_"):
        assert text in result.stdout


@pytest.mark.parametrize("command", ["demo", "worker", "bench"])
def test_each_command_help_shows_examples(run_cli: RunCli, command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert f"usage: blamequeue {command}" in result.stdout
    assert "examples:" in result.stdout
    assert f"blamequeue {command}" in result.stdout.split("examples:", 1)[1]


def test_no_command_is_a_usage_error(run_cli: RunCli) -> None:
    result = run_cli()
    assert result.returncode == 2
    assert "usage: blamequeue" in result.stderr


def test_an_unknown_command_is_a_usage_error(run_cli: RunCli) -> None:
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "error: unknown command 'frobnicate'\n" in result.stderr
    assert "expected: blamequeue COMMAND ..." in result.stderr


def test_a_bad_option_value_is_a_usage_error(run_cli: RunCli) -> None:
    result = run_cli("bench", "--concurrency", "0")
    assert result.returncode == 2
    assert "must be at least 1" in result.stderr


def _failing_keygen(kid: str | None) -> str:
    raise RuntimeError("cannot reach redis://:hunter2@cache:6379")


@pytest.mark.parametrize(
    ("argv", "env"),
    [((), None), (("--debug",), None), ((), "1")],
    ids=["one-line", "--debug", "BLAMEQUEUE_DEBUG=1"],
)
def test_an_unexpected_error_is_one_line_and_its_traceback_is_shown_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    env: str | None,
) -> None:
    monkeypatch.setattr(_keygen, "new_key_line", _failing_keygen)
    if env is None:
        monkeypatch.delenv("BLAMEQUEUE_DEBUG", raising=False)
    else:
        monkeypatch.setenv("BLAMEQUEUE_DEBUG", env)

    code = main([*argv, "keygen"])

    err = capsys.readouterr().err
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: RuntimeError: cannot reach redis://***@cache:6379")
    assert "hunter2" not in err  # masked in the line and in the traceback
    if argv or env:
        assert "Traceback (most recent call last)" in err
        assert "_failing_keygen" in err
    else:
        assert err.count("\n") == 1
        assert "blamequeue --debug" in line
