"""``blamequeue keygen`` and ``blamequeue audit verify``, run the way a user runs them."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from blamequeue import AuditEvent, JsonlAuditSink, Queue
from blamequeue._environment import parse_seal_keys

RunCli = Callable[..., subprocess.CompletedProcess[str]]


# -- keygen ------------------------------------------------------------------------------------
def test_keygen_prints_one_line_usable_as_blamequeue_seal_keys(run_cli: RunCli) -> None:
    result = run_cli("keygen")
    assert result.returncode == 0
    line = result.stdout.strip()
    assert "\n" not in line
    [(kid, key)] = parse_seal_keys(line).items()
    assert kid.startswith("k")
    assert len(base64.b64decode(key, validate=True)) == 32
    queue = Queue.from_env({"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SEAL_KEYS": line})
    assert queue._runtimes["default"].codec.encode_payload(1).startswith(f"bq1:{kid}:")


def test_keygen_makes_a_new_key_every_time(run_cli: RunCli) -> None:
    first, second = run_cli("keygen", "--kid", "k"), run_cli("keygen", "--kid", "k")
    assert first.stdout.startswith("k:")
    assert first.stdout != second.stdout


def test_keygen_json_gives_kid_key_and_line(run_cli: RunCli) -> None:
    result = run_cli("keygen", "--kid", "2025-06.primary", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["kid"] == "2025-06.primary"
    assert data["line"] == f"{data['kid']}:{data['key']}"


@pytest.mark.parametrize("kid", ["has space", "a:b", "a,b", "", "_leading_underscore", "x" * 65])
def test_keygen_refuses_a_key_id_that_cannot_be_stored(run_cli: RunCli, kid: str) -> None:
    result = run_cli("keygen", "--kid", kid)
    assert result.returncode == 2
    assert "error:" in result.stderr
    assert result.stdout == ""


# -- audit verify ------------------------------------------------------------------------------
def write_audit_file(path: Path, count: int) -> list[str]:
    async def main() -> None:
        sink = JsonlAuditSink(path)
        for n in range(count):
            await sink.emit(
                AuditEvent(
                    name="system.queue.dlq.write",
                    time=datetime(2025, 1, 1, 0, 0, n, tzinfo=UTC),
                    backend="b",
                    queue="q",
                    job_id=f"job-{n}",
                )
            )

    anyio.run(main)
    return path.read_text().splitlines(keepends=True)


def test_audit_verify_accepts_an_intact_file(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    content = write_audit_file(path, 5)
    result = run_cli("audit", "verify", str(path))
    assert result.returncode == 0
    assert result.stdout.startswith("OK: 5 events")
    assert json.loads(content[-1])["hash"] in result.stdout


def edit(content: list[str]) -> list[str]:
    content[2] = content[2].replace("job-2", "job-9")
    return content


def remove(content: list[str]) -> list[str]:
    del content[2]
    return content


def reorder(content: list[str]) -> list[str]:
    content[2], content[3] = content[3], content[2]
    return content


def insert(content: list[str]) -> list[str]:
    content.insert(2, content[0])
    return content


@pytest.mark.parametrize("tamper", [edit, remove, reorder, insert])
def test_audit_verify_names_the_first_bad_line(
    run_cli: RunCli, tmp_path: Path, tamper: Callable[[list[str]], list[str]]
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(tamper(write_audit_file(path, 5))))
    result = run_cli("audit", "verify", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith("FAILED: line 3:")
    assert "(2 events verified before it)" in result.stdout


def test_audit_verify_json(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(edit(write_audit_file(path, 4))))
    result = run_cli("audit", "verify", str(path), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert (report["ok"], report["events"], report["bad_line"]) == (False, 2, 3)
    assert "edited" in report["problem"]


def test_audit_verify_of_a_missing_file_is_a_usage_error(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("audit", "verify", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "no such audit file" in result.stderr


@pytest.mark.parametrize("command", [("keygen",), ("audit", "verify")])
def test_help_shows_examples(run_cli: RunCli, command: tuple[str, ...]) -> None:
    result = run_cli(*command, "--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout
    assert f"blamequeue {' '.join(command)}" in result.stdout.split("examples:", 1)[1]


def test_the_main_help_lists_keygen_and_audit(run_cli: RunCli) -> None:
    result = run_cli("--help")
    assert "keygen" in result.stdout
    assert "audit" in result.stdout
