"""The commands that change a queue, as a user runs them: ``enqueue``, ``tick``, ``purge`` (with
its confirmation on a terminal) and ``dlq list|retry|retry-all|size|purge``."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from cli_helpers import DEADLINE, QUEUE, RunCli, command, environment, json_of, seed, sizes


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


# -- enqueue ----------------------------------------------------------------------------------
def test_enqueue_prints_the_job_id_and_stores_the_job(run_cli: RunCli, db: Path) -> None:
    result = run_cli("enqueue", QUEUE, '{"to": "ada"}', "--path", str(db))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    assert job_id.startswith("job-")
    assert len(job_id) == 30
    job = json_of(run_cli("job", job_id, "--path", str(db), "--json"))
    assert (job["queue"], job["state"], job["payload"]) == (QUEUE, "pending", {"to": "ada"})


def test_enqueue_honours_every_option(run_cli: RunCli, db: Path) -> None:
    result = run_cli(
        "enqueue",
        QUEUE,
        '"text"',
        "--priority",
        "7",
        "--delay",
        "60",
        "--max-attempts",
        "2",
        "--trace-id",
        "trace-9",
        "--classification",
        "pii",
        "--json",
        "--path",
        str(db),
    )
    document = json_of(result)
    assert (document["queue"], document["backend"]) == (QUEUE, "default")
    job = json_of(run_cli("job", document["job_id"], "--path", str(db), "--json"))
    assert (job["payload"], job["priority"], job["max_attempts"]) == ("text", 7, 2)
    assert (job["trace_id"], job["classification"]) == ("trace-9", "pii")
    assert job["available_at"] > job["created_at"]


def test_enqueue_with_a_unique_key_prints_the_live_jobs_id(run_cli: RunCli, db: Path) -> None:
    first = run_cli("enqueue", QUEUE, "1", "--unique-key", "k", "--path", str(db))
    again = run_cli(
        "enqueue", QUEUE, "2", "--unique-key", "k", "--unique-for", "60", "--path", str(db)
    )
    assert first.returncode == again.returncode == 0, again.stderr
    assert again.stdout == first.stdout


def test_enqueue_reads_the_payload_from_stdin(db: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        command("enqueue", QUEUE, "-", "--path", str(db), "--json"),
        input='{"report": 7}\n',
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment(),
        timeout=DEADLINE,
        check=False,
    )
    job_id = json_of(result)["job_id"]
    payload = json_of(
        subprocess.run(
            command("job", job_id, "--path", str(db), "--json"),
            capture_output=True,
            text=True,
            env=environment(),
            timeout=DEADLINE,
            check=False,
        )
    )["payload"]
    assert payload == {"report": 7}


def test_enqueue_without_a_payload_enqueues_null(run_cli: RunCli, db: Path) -> None:
    job_id = run_cli("enqueue", QUEUE, "--path", str(db)).stdout.strip()
    assert json_of(run_cli("job", job_id, "--path", str(db), "--json"))["payload"] is None


def test_enqueue_refuses_a_payload_that_is_not_json(run_cli: RunCli, db: Path) -> None:
    result = run_cli("enqueue", QUEUE, "{to: ada}", "--path", str(db))
    assert result.returncode == 2
    assert "PAYLOAD_JSON is not valid JSON" in result.stderr
    assert not db.exists()


def test_enqueue_refuses_an_out_of_range_priority(run_cli: RunCli, db: Path) -> None:
    result = run_cli("enqueue", QUEUE, "1", "--priority", str(2**31), "--path", str(db))
    assert result.returncode == 2
    assert "[queue/bad-argument] priority must be between" in result.stderr
    assert sizes(db) == (0, 0)


# -- tick -------------------------------------------------------------------------------------
TASKS = textwrap.dedent(
    """
    async def handle(job, ctx):
        if job.payload.get("fail"):
            raise ValueError("refused " + str(job.payload["n"]))
    """
)


def test_tick_runs_one_batch_and_reports_the_counts(
    run_cli: RunCli, db: Path, tmp_path: Path
) -> None:
    (tmp_path / "tasks.py").write_text(TASKS)
    for payload in ('{"n": 1}', '{"n": 2, "fail": true}', '{"n": 3}'):
        run_cli("enqueue", QUEUE, payload, "--max-attempts", "1", "--path", str(db))

    result = run_cli("tick", "tasks:handle", QUEUE, "--max", "2", "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert "deprecated" not in result.stderr
    assert result.stdout == (
        f"tick of {QUEUE!r}: leased 2, succeeded 1, failed 1 (1 to the DLQ); "
        f"1 live job(s) left; more may be due now\n"
    )
    # The order before the handler came first still works, with a warning, for one release.
    old_order = run_cli("tick", QUEUE, "tasks:handle", "--json", "--path", str(db))
    assert old_order.stderr == (
        "warning: `blamequeue tick QUEUE MODULE:OBJECT` is deprecated and stops working in the "
        f"next release; give the handler first: blamequeue tick tasks:handle {QUEUE}\n"
    )
    document = json_of(old_order)
    assert document == {
        "queue": QUEUE,
        "backend": "default",
        "leased": 1,
        "succeeded": 1,
        "failed": 0,
        "stale": 0,
        "unsettled": 0,
        "moved_to_dlq": 0,
        "may_have_more": False,
        "queue_depth": 0,
        "deferred": 0,
    }
    assert sizes(db) == (0, 1)


def test_tick_with_a_handler_that_cannot_be_imported_is_a_usage_error(
    run_cli: RunCli, db: Path
) -> None:
    seed(db, pending=1)
    result = run_cli("tick", "nowhere:handle", QUEUE, "--path", str(db))
    assert result.returncode == 2
    assert "cannot import module 'nowhere'" in result.stderr
    assert sizes(db) == (1, 0)


# -- purge ------------------------------------------------------------------------------------
def test_purge_off_a_terminal_refuses_without_yes(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=2)
    result = run_cli("purge", QUEUE, "--path", str(db))
    assert result.returncode == 2
    assert "stdin is not a terminal; pass --yes" in result.stderr
    assert sizes(db) == (2, 0)


def test_purge_with_yes_deletes_the_live_jobs_and_keeps_the_dlq(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=2, dead=1)
    document = json_of(run_cli("purge", QUEUE, "--yes", "--json", "--path", str(db)))
    assert document == {"queue": QUEUE, "backend": "default", "deleted": 2}
    assert sizes(db) == (0, 1)


def _on_a_terminal(args: list[str], answer: str, cwd: Path) -> tuple[int, str, str]:
    """Run the CLI with a pseudo-terminal as stdin, answer its question, return
    (exit code, stdout, stderr)."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            command(*args),
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=environment(),
        )
        os.close(terminal)
        assert proc.stderr is not None
        # Wait for the question before answering, as a person would.
        asked = ""
        deadline = time.monotonic() + DEADLINE
        while "[y/N]" not in asked:
            assert time.monotonic() < deadline, f"no question asked; stderr so far: {asked!r}"
            char = proc.stderr.read(1)
            assert char, f"the command ended without asking; stderr: {asked!r}"
            asked += char
        os.write(controller, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=DEADLINE)
        return proc.returncode, out, asked + err
    finally:
        os.close(controller)


def test_purge_on_a_terminal_asks_and_deletes_on_yes(db: Path, tmp_path: Path) -> None:
    seed(db, pending=3)
    code, out, err = _on_a_terminal(["purge", QUEUE, "--path", str(db)], "y", tmp_path)
    assert code == 0, err
    assert f"Delete the 3 live job(s) of queue {QUEUE!r}" in err
    assert out == f"purged 3 live job(s) from queue {QUEUE!r}\n"
    assert sizes(db) == (0, 0)


def test_purge_on_a_terminal_keeps_everything_unless_the_answer_is_yes(
    db: Path, tmp_path: Path
) -> None:
    seed(db, pending=3)
    code, out, err = _on_a_terminal(["purge", QUEUE, "--path", str(db)], "n", tmp_path)
    assert code == 1
    assert "cancelled; nothing was deleted" in err
    assert out == ""
    assert sizes(db) == (3, 0)


# -- the dead-letter queue --------------------------------------------------------------------
def test_dlq_list_shows_the_dead_jobs_most_recent_first(run_cli: RunCli, db: Path) -> None:
    dead = seed(db, dead=2, pending=1)["dead"]
    result = run_cli("dlq", "list", QUEUE, "--path", str(db))
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()[2:]
    assert [row.split()[0] for row in rows] == dead[::-1]
    assert "ValueError: cannot send 1" in rows[0]
    letters = json_of(run_cli("dlq", "list", QUEUE, "--limit", "1", "--json", "--path", str(db)))
    [letter] = letters["dead_letters"]
    assert (letter["job_id"], letter["attempts"]) == (dead[1], 1)
    assert letter["payload"] == {"n": 1, "will": "fail"}


def test_dlq_size_counts_the_dead_jobs(run_cli: RunCli, db: Path) -> None:
    seed(db, dead=2, pending=1)
    assert run_cli("dlq", "size", QUEUE, "--path", str(db)).stdout == "2\n"
    assert json_of(run_cli("dlq", "size", QUEUE, "--json", "--path", str(db)))["size"] == 2


def test_dlq_retry_puts_the_job_back_to_pending(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, dead=1)["dead"]
    result = run_cli("dlq", "retry", job_id, "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{job_id} is back to pending on backend 'default' (attempts reset)\n"
    job = json_of(run_cli("job", job_id, "--path", str(db), "--json"))
    assert (job["state"], job["attempts"]) == ("pending", 0)


def test_dlq_retry_of_an_unknown_id_exits_3(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, pending=1)["pending"]  # not dead: nothing to retry
    result = run_cli("dlq", "retry", job_id, "--path", str(db))
    assert result.returncode == 3
    assert f"no dead job {job_id} on backend 'default'" in result.stderr
    document = json.loads(run_cli("dlq", "retry", job_id, "--json", "--path", str(db)).stdout)
    assert document == {"job_id": job_id, "backend": None, "retried": False}


def test_dlq_retry_all_puts_every_dead_job_back_to_pending(run_cli: RunCli, db: Path) -> None:
    dead = seed(db, dead=2, pending=1)["dead"]
    result = run_cli("dlq", "retry-all", QUEUE, "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"2 dead jobs of {QUEUE!r} back to pending (attempts reset)\n"
    assert sizes(db) == (3, 0)
    for job_id in dead:
        job = json_of(run_cli("job", job_id, "--path", str(db), "--json"))
        assert (job["state"], job["attempts"]) == ("pending", 0)
    again = json_of(run_cli("dlq", "retry-all", QUEUE, "--json", "--path", str(db)))
    assert again == {"queue": QUEUE, "backend": "default", "retried": 0}


def test_dlq_purge_with_yes_empties_the_dlq(run_cli: RunCli, db: Path) -> None:
    seed(db, dead=2, pending=1)
    refused = run_cli("dlq", "purge", QUEUE, "--path", str(db))
    assert refused.returncode == 2
    result = run_cli("dlq", "purge", QUEUE, "--yes", "--path", str(db))
    assert result.stdout == f"deleted 2 dead job(s) of queue {QUEUE!r}\n"
    assert sizes(db) == (1, 0)
