"""``blamequeue keygen`` and ``blamequeue audit verify``, run the way a user runs them."""

from __future__ import annotations

import base64
import hashlib
import hmac
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
    assert queue._runtimes["default"].codec.encode_payload(1, b"").startswith(f"bq1:{kid}:")


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
KEY_LINE = "k1:" + base64.b64encode(bytes(range(32))).decode()
WITH_KEY = {"BLAMEQUEUE_SEAL_KEYS": KEY_LINE}


def write_audit_file(path: Path, count: int, keys: str = KEY_LINE) -> list[str]:
    async def main() -> None:
        sink = JsonlAuditSink(path, keys=keys)
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


def test_audit_verify_with_blamequeue_seal_keys_needs_nothing_else(
    run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    content = write_audit_file(path, 5)
    result = run_cli("audit", "verify", str(path), env=WITH_KEY)
    assert result.returncode == 0, result.stdout + result.stderr
    head = json.loads(content[-1])["mac"]
    assert result.stdout.startswith(f"OK: 5 events, head 5 {head}")
    assert "key id(s) k1" in result.stdout


def test_audit_verify_without_the_key_says_how_to_give_it(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_file(path, 2)
    result = run_cli("audit", "verify", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith("FAILED: line 1: written with key id 'k1'")
    assert "BLAMEQUEUE_SEAL_KEYS" in result.stdout


def test_audit_verify_reads_a_key_file(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_file(path, 2)
    key_file = tmp_path / "audit.key"
    key_file.write_text(KEY_LINE + "\n")
    key_file.chmod(0o600)
    result = run_cli("audit", "verify", str(path), "--key-file", str(key_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_audit_verify_finds_the_key_file_of_the_local_database(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """A sink in a queue on the local backend keys its chain with the database's key file."""

    async def main() -> None:
        sink = JsonlAuditSink(tmp_path / "audit.jsonl")
        db = tmp_path / "jobs.db"
        async with Queue(
            backends={"b": {"protocol": "local", "path": str(db)}}, audit_sinks=[sink]
        ) as q:
            await q.purge("q")

    anyio.run(main)
    result = run_cli("audit", "verify", "audit.jsonl", "--path", "jobs.db")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK: 1 events")


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


def respace(content: list[str]) -> list[str]:
    content[2] = content[2].replace('"queue":"q"', '"queue": "q"')
    return content


def rekey(content: list[str]) -> list[str]:
    """Line 3 rewritten by someone without the key: its MAC recomputed with a guessed key."""
    record = json.loads(content[2])
    record.pop("mac")
    record["job_id"] = "job-9"
    body = json.dumps(record, separators=(",", ":"))[:-1]
    mac = hmac.new(b"guess" * 8, body.encode(), hashlib.sha256).hexdigest()
    content[2] = body + f',"mac":"{mac}"}}\n'
    return content


@pytest.mark.parametrize("tamper", [edit, remove, reorder, insert, respace, rekey])
def test_audit_verify_names_the_first_bad_line(
    run_cli: RunCli, tmp_path: Path, tamper: Callable[[list[str]], list[str]]
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(tamper(write_audit_file(path, 5))))
    result = run_cli("audit", "verify", str(path), env=WITH_KEY)
    assert result.returncode == 1
    assert result.stdout.startswith("FAILED: line 3:")
    assert "(2 events verified before it" in result.stdout


def test_audit_verify_json(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(edit(write_audit_file(path, 4))))
    result = run_cli("audit", "verify", str(path), "--json", env=WITH_KEY)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert (report["ok"], report["events"], report["bad_line"]) == (False, 2, 3)
    assert report["head"]["count"] == 2
    assert "edited" in report["problem"]


@pytest.mark.parametrize("cut", [1, 3])
def test_audit_verify_catches_lines_cut_off_the_end_with_a_recorded_head(
    run_cli: RunCli, tmp_path: Path, cut: int
) -> None:
    path = tmp_path / "audit.jsonl"
    content = write_audit_file(path, 6)
    head = json.loads(content[-1])["mac"]
    path.write_text("".join(content[:-cut]))
    assert run_cli("audit", "verify", str(path), env=WITH_KEY).returncode == 0
    by_count = run_cli("audit", "verify", str(path), "--expect-count", "6", env=WITH_KEY)
    assert by_count.returncode == 1
    assert f"the chain has {6 - cut} lines, fewer than the 6 recorded" in by_count.stdout
    by_head = run_cli("audit", "verify", str(path), "--expect-head", head, env=WITH_KEY)
    assert by_head.returncode == 1
    assert "is not in the chain" in by_head.stdout
    both = run_cli(
        "audit",
        "verify",
        str(path),
        "--expect-count",
        "6",
        "--expect-head",
        head,
        "--json",
        env=WITH_KEY,
    )
    assert (both.returncode, json.loads(both.stdout)["ok"]) == (1, False)


def test_audit_verify_accepts_a_head_the_chain_reached_and_went_past(
    run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    content = write_audit_file(path, 4)
    head = json.loads(content[1])["mac"]
    result = run_cli(
        "audit", "verify", str(path), "--expect-count", "2", "--expect-head", head, env=WITH_KEY
    )
    assert result.returncode == 0, result.stdout


def test_audit_verify_refuses_a_head_that_is_not_one(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_file(path, 1)
    result = run_cli("audit", "verify", str(path), "--expect-head", "3f1c", env=WITH_KEY)
    assert result.returncode == 2
    assert "is not a head" in result.stderr


def test_audit_verify_reports_a_recovered_torn_line(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_file(path, 2)
    with path.open("a") as handle:
        handle.write('{"v":2,"seq":3,"ki')
    write_audit_file(path, 1)
    result = run_cli("audit", "verify", str(path), env=WITH_KEY)
    assert result.returncode == 0, result.stdout
    assert "OK: 4 events" in result.stdout
    assert "recovered at line 3: a torn line of 18 bytes" in result.stdout


def older_file(path: Path, count: int) -> None:
    prev, out = "0" * 64, []
    for n in range(count):
        record = {
            "name": "system.queue.purge",
            "time": "2025-01-01T00:00:00+00:00",
            "backend": "b",
            "queue": "q",
            "job_id": None,
            "trace_id": None,
            "classification": None,
            "data": {"deleted": n},
            "prev": prev,
        }
        canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
        prev = record["hash"] = hashlib.sha256(canonical.encode()).hexdigest()
        out.append(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
    path.write_text("".join(out))


def test_audit_verify_reports_a_file_of_the_older_unkeyed_format(
    run_cli: RunCli, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    older_file(path, 3)
    result = run_cli("audit", "verify", str(path), env=WITH_KEY)
    assert result.returncode == 1
    assert "written by an older version: unkeyed chain" in result.stdout
    allowed = run_cli("audit", "verify", str(path), "--allow-unkeyed", env=WITH_KEY)
    assert allowed.returncode == 0
    assert "unkeyed chain: tamper-evident only against accidental edits" in allowed.stdout


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
