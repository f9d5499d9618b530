"""``--config FILE.toml``: several backends from a file, ``--backend`` to pick one, and every
mistake in the file an exit code 2 with the configuration error's message."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import QUEUE, RunCli, json_of


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queues.toml"
    path.write_text(text)
    return path


@pytest.fixture
def two_backends(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        f"""
        default_backend = "primary"
        sweep_interval = 5

        [backends.primary]
        protocol = "local"
        path = "{tmp_path / "primary.db"}"
        max_attempts = 2

        [backends.archive]
        protocol = "local"
        path = "{tmp_path / "archive.db"}"

        [backends.archive.retry]
        attempts = 1
        """,
    )


def test_a_config_file_configures_several_backends(run_cli: RunCli, two_backends: Path) -> None:
    config = str(two_backends)
    first = json_of(run_cli("enqueue", QUEUE, "1", "--config", config, "--json"))
    second = json_of(
        run_cli("enqueue", QUEUE, "2", "--config", config, "--backend", "archive", "--json")
    )
    assert (first["backend"], second["backend"]) == ("primary", "archive")

    job = json_of(run_cli("job", first["job_id"], "--config", config, "--json"))
    assert (job["backend"], job["max_attempts"]) == ("primary", 2)  # the file's max_attempts
    queues = json_of(run_cli("queues", "--config", config, "--json"))["queues"]
    assert [(q["backend"], q["name"], q["pending"]) for q in queues] == [
        ("primary", QUEUE, 1),
        ("archive", QUEUE, 1),
    ]
    backends = json_of(run_cli("backends", "--config", config, "--json"))["backends"]
    assert [(b["name"], b["default"]) for b in backends] == [
        ("primary", True),
        ("archive", False),
    ]
    assert run_cli("size", QUEUE, "--config", config, "--backend", "archive").stdout == "1\n"


def test_job_finds_a_job_on_any_backend_of_the_file(run_cli: RunCli, two_backends: Path) -> None:
    config = str(two_backends)
    run_cli("enqueue", QUEUE, "1", "--config", config)
    archived = run_cli("enqueue", QUEUE, "2", "--config", config, "--backend", "archive")
    job_id = archived.stdout.strip()
    assert json_of(run_cli("job", job_id, "--config", config, "--json"))["backend"] == "archive"


def test_an_unknown_backend_is_a_usage_error(run_cli: RunCli, two_backends: Path) -> None:
    result = run_cli("size", QUEUE, "--config", str(two_backends), "--backend", "nope")
    assert result.returncode == 2
    assert "--backend 'nope' is not configured; configured backends: archive, primary" in (
        result.stderr
    )


def test_config_and_path_exclude_each_other(run_cli: RunCli, two_backends: Path) -> None:
    result = run_cli("size", QUEUE, "--config", str(two_backends), "--path", "x.db")
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[backends.primary\nprotocol = 'local'", "is not valid TOML"),
        ("default_backend = 'primary'", "defines no backend"),
        ("[backends]\nprimary = 'local'", "backends.primary must be a table"),
        ("[backends.primary]\nprotocol = 'local'\n[extra]\nx = 1", "unknown key(s) 'extra'"),
        ("[backends.primary]\nprotocol = 'carrier-pigeon'", "unknown protocol 'carrier-pigeon'"),
        ("[backends.primary]\nprotocol = 'amqp'", "[queue/deferred-protocol]"),
        (
            "[backends.a]\nprotocol = 'memory'\n[backends.b]\nprotocol = 'memory'",
            "default_backend is required",
        ),
        ("sweep_interval = -1\n[backends.a]\nprotocol = 'memory'", "sweep_interval must be"),
        ("[backends.a]\nprotocol = 'memory'\nmax_attempts = 0", "max_attempts must be"),
    ],
)
def test_a_bad_config_file_exits_2_with_the_configuration_error(
    run_cli: RunCli, tmp_path: Path, text: str, message: str
) -> None:
    path = write_config(tmp_path, text)
    result = run_cli("queues", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: [queue/")
    assert message in result.stderr
    assert result.stdout == ""


def test_a_missing_config_file_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("queues", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert f"config file {tmp_path / 'nope.toml'} does not exist" in result.stderr


def test_a_bad_environment_exits_2(run_cli: RunCli) -> None:
    result = run_cli("queues", env={"BLAMEQUEUE_PROTOCOL": "carrier-pigeon"})
    assert result.returncode == 2
    assert "BLAMEQUEUE_PROTOCOL='carrier-pigeon' is not a protocol" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["enqueue"],
        ["tick"],
        ["size"],
        ["purge"],
        ["jobs"],
        ["job"],
        ["logs"],
        ["promote"],
        ["change-delay"],
        ["change-priority"],
        ["update-payload"],
        ["rerun"],
        ["queues"],
        ["workers"],
        ["backends"],
        ["plugins"],
        ["dlq"],
        ["dlq", "list"],
        ["dlq", "retry"],
        ["dlq", "retry-all"],
        ["dlq", "size"],
        ["dlq", "purge"],
    ],
)
def test_every_command_help_teaches_with_examples(run_cli: RunCli, command: list[str]) -> None:
    result = run_cli(*command, "--help")
    assert result.returncode == 0
    assert f"usage: blamequeue {' '.join(command)}" in result.stdout
    examples = result.stdout.split("examples:", 1)[1]
    assert f"blamequeue {command[0]}" in examples
    if command != ["plugins"]:
        assert "--config" in result.stdout


def test_the_main_help_documents_exit_code_3(run_cli: RunCli) -> None:
    result = run_cli("--help")
    assert "3    not found" in result.stdout
    for command in ("enqueue", "tick", "jobs", "queues", "workers", "dlq", "plugins"):
        assert f"    {command} " in result.stdout


def test_a_worker_runs_from_a_config_file(
    run_cli: RunCli,
    spawn_cli: Callable[..., subprocess.Popen[str]],
    wait_until: Callable[..., None],
    two_backends: Path,
    tmp_path: Path,
) -> None:
    (tmp_path / "tasks.py").write_text("async def handle(job, ctx):\n    pass\n")
    config = str(two_backends)
    job_id = run_cli("enqueue", QUEUE, '{"n": 1}', "--config", config).stdout.strip()

    proc = spawn_cli("worker", "tasks:handle", "--queue", QUEUE, "--config", config)

    def done() -> bool:
        job = json_of(run_cli("job", job_id, "--config", config, "--json"))
        return bool(job["state"] == "done")

    wait_until(done, "the worker to run the job")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert f"local ({tmp_path / 'primary.db'})" in (tmp_path / "stderr-0.txt").read_text()
