"""The read-only commands as a user runs them: ``size``, ``jobs``, ``job``, ``queues``,
``workers``, ``backends`` and ``plugins``; tables for people, ``--json`` for scripts."""

from __future__ import annotations

import re
import signal
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import QUEUE, RunCli, json_of, seed

SpawnCli = Callable[..., subprocess.Popen[str]]
WaitUntil = Callable[..., None]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


def test_size_prints_the_live_jobs(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=3, dead=1)
    result = run_cli("size", QUEUE, "--path", str(db))
    assert (result.returncode, result.stdout) == (0, "3\n")
    assert json_of(run_cli("size", QUEUE, "--path", str(db), "--json")) == {
        "queue": QUEUE,
        "backend": "default",
        "size": 3,
    }


def test_reading_a_database_that_does_not_exist_is_a_usage_error_and_creates_nothing(
    run_cli: RunCli, tmp_path: Path
) -> None:
    result = run_cli("jobs", QUEUE)
    assert result.returncode == 2
    assert "no queue database at ./blamequeue.db" in result.stderr
    assert not (tmp_path / "blamequeue.db").exists()


def test_the_environment_picks_the_database(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=2)
    result = run_cli("size", QUEUE, env={"BLAMEQUEUE_LOCAL_PATH": str(db)})
    assert result.stdout == "2\n"


def test_jobs_shows_a_table_by_state_then_enqueue_order(run_cli: RunCli, db: Path) -> None:
    ids = seed(db, pending=2, done=1, dead=1)
    result = run_cli("jobs", QUEUE, "--path", str(db))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "STATE", "PRI", "ATTEMPTS"]
    rows = [line.split()[:2] for line in lines[2:]]
    assert rows == [
        [ids["pending"][0], "pending"],
        [ids["pending"][1], "pending"],
        [ids["done"][0], "done"],
        [ids["dead"][0], "dead"],
    ]
    assert "ValueError: cannot send 0" in lines[-1]
    assert '{"n": 0}' in lines[2]
    assert "more jobs" not in result.stdout


def test_jobs_pages_with_the_cursor_it_prints(run_cli: RunCli, db: Path) -> None:
    ids = seed(db, pending=5)["pending"]
    first = run_cli("jobs", QUEUE, "--path", str(db), "--limit", "2")
    match = re.search(r"more jobs: (blamequeue jobs .*)$", first.stdout.strip())
    assert match is not None, first.stdout
    command = match.group(1).split()
    assert command[:2] == ["blamequeue", "jobs"]
    second = run_cli(*command[1:], "--path", str(db))
    assert [line.split()[0] for line in second.stdout.splitlines()[2:4]] == ids[2:4]


def test_jobs_json_walks_every_page_exactly_once(run_cli: RunCli, db: Path) -> None:
    ids = seed(db, pending=3, dead=2)
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(10):
        page = json_of(run_cli("jobs", QUEUE, "--path", str(db), "--limit", "2", "--json", *cursor))
        seen += [job["id"] for job in page["jobs"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert seen == ids["pending"] + ids["dead"]


def test_jobs_state_keeps_one_state_with_every_field_in_json(run_cli: RunCli, db: Path) -> None:
    ids = seed(db, pending=2, dead=1)
    page = json_of(run_cli("jobs", QUEUE, "--path", str(db), "--state", "dead", "--json"))
    [job] = page["jobs"]
    assert job["id"] == ids["dead"][0]
    assert job["state"] == "dead"
    assert job["payload"] == {"n": 0, "will": "fail"}
    assert (job["attempts"], job["max_attempts"]) == (1, 1)
    assert job["last_error"].startswith("ValueError: cannot send 0")
    assert job["finished_at"].endswith("+00:00")
    assert page["next_cursor"] is None


def test_jobs_of_an_empty_queue_says_so(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=1)
    result = run_cli("jobs", "other", "--path", str(db))
    assert result.returncode == 0
    assert result.stdout == "no jobs in queue 'other' (backend 'default')\n"


def test_jobs_refuses_a_cursor_it_did_not_print(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=1)
    result = run_cli("jobs", QUEUE, "--path", str(db), "--cursor", "bogus")
    assert result.returncode == 2
    assert "error: [queue/bad-argument] cursor 'bogus'" in result.stderr


@pytest.mark.parametrize("limit", ["0", "1001", "many"])
def test_jobs_refuses_a_bad_limit(run_cli: RunCli, db: Path, limit: str) -> None:
    result = run_cli("jobs", QUEUE, "--path", str(db), "--limit", limit)
    assert result.returncode == 2
    assert "--limit" in result.stderr


def test_job_shows_one_job_in_full(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, dead=1)["dead"]
    result = run_cli("job", job_id, "--path", str(db))
    assert result.returncode == 0, result.stderr
    fields = dict(
        line.split(None, 1) for line in result.stdout.splitlines() if not line.startswith(" ")
    )
    assert fields["id"] == job_id
    assert fields["state"] == "dead"
    assert fields["attempts"] == "1 of 1"
    assert fields["last_error"] == "ValueError: cannot send 0"
    assert '"will": "fail"' in result.stdout
    assert "Traceback" in result.stdout  # the full last error, indented under it


def test_job_json_carries_the_state(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, pending=1)["pending"]
    job = json_of(run_cli("job", job_id, "--path", str(db), "--json"))
    assert (job["id"], job["state"], job["queue"], job["payload"]) == (
        job_id,
        "pending",
        QUEUE,
        {"n": 0},
    )


def test_job_of_an_unknown_id_exits_3(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=1)
    result = run_cli("job", "job-00000000000000000000000000", "--path", str(db))
    assert result.returncode == 3
    assert result.stdout == ""
    assert "no job job-00000000000000000000000000 on backend 'default'" in result.stderr


def test_queues_counts_every_state_of_every_queue(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=2, dead=1, done=1)
    seed(db, pending=1, queue="digests")
    result = run_cli("queues", "--path", str(db))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "BACKEND",
        "QUEUE",
        "PENDING",
        "INFLIGHT",
        "PARKED",
        "DONE",
        "DEAD",
        "CANCELLED",
    ]
    assert [line.split() for line in lines[2:]] == [
        ["default", "digests", "1", "0", "0", "0", "0", "0"],
        ["default", QUEUE, "2", "0", "0", "1", "1", "0"],
    ]
    document = json_of(run_cli("queues", "--path", str(db), "--json"))
    assert document["queues"][1] == {
        "name": QUEUE,
        "backend": "default",
        "size": 2,
        "pending": 2,
        "inflight": 0,
        "parked": 0,
        "done": 1,
        "dead": 1,
        "cancelled": 0,
    }


HANDLERS = textwrap.dedent(
    """
    async def handle(job, ctx):
        pass
    """
)


def test_workers_lists_a_running_worker_until_it_stops(
    run_cli: RunCli, spawn_cli: SpawnCli, wait_until: WaitUntil, db: Path, tmp_path: Path
) -> None:
    seed(db, pending=1)
    (tmp_path / "tasks.py").write_text(HANDLERS)
    assert json_of(run_cli("workers", "--path", str(db), "--json")) == {"workers": []}

    proc = spawn_cli("worker", "tasks:handle", "--queue", QUEUE, "-c", "3", "--path", str(db))
    listed: list[dict[str, object]] = []

    def registered() -> bool:
        listed[:] = json_of(run_cli("workers", "--path", str(db), "--json"))["workers"]
        return bool(listed)

    wait_until(registered, "the worker to register")
    [worker] = listed
    assert (worker["queue"], worker["pid"], worker["concurrency"]) == (QUEUE, proc.pid, 3)
    table = run_cli("workers", "--path", str(db)).stdout.splitlines()
    assert table[0].split()[:4] == ["WORKER", "BACKEND", "QUEUE", "HOST"]
    assert table[2].split()[0] == worker["id"]
    assert table[2].endswith("ago")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert run_cli("workers", "--path", str(db)).stdout == "no live workers\n"


def test_backends_shows_the_breaker_state(run_cli: RunCli, db: Path) -> None:
    seed(db, pending=1)
    result = run_cli("backends", "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].split()[:4] == ["default", "local", "closed", "yes"]
    [backend] = json_of(run_cli("backends", "--path", str(db), "--json"))["backends"]
    assert backend["breaker_state"] == "closed"
    assert {"dlq", "flows", "inspection"} <= set(backend["capabilities"])


def test_plugins_lists_each_plugin_with_its_distribution(run_cli: RunCli) -> None:
    document = json_of(run_cli("plugins", "--json"))
    by_name = {plugin["name"]: plugin for plugin in document["plugins"]}
    assert by_name["local"]["protocols"] == ["local"]
    assert by_name["local"]["distribution"] == "blamequeue-local"
    assert by_name["memory"]["distribution"] == "blamequeue-testing"
    assert by_name["memory"]["dev_servers"] == ["redis", "sqs"]
    assert by_name["deferred"]["protocols"] == ["amqp", "nats"]
    assert by_name["deferred"]["status"] == "deferred: not implemented yet"
    assert by_name["local"]["status"] == "ok"
    assert by_name["local"]["version"]
    table = run_cli("plugins").stdout.splitlines()
    assert table[0].split() == [
        "PLUGIN",
        "PROTOCOLS",
        "AUDIT",
        "SINKS",
        "SEALERS",
        "DEV",
        "SERVERS",
        "DISTRIBUTION",
        "VERSION",
        "STATUS",
    ]
    assert any(line.split()[:2] == ["local", "local"] for line in table[2:])
    [deferred] = [line for line in table if line.startswith("deferred ")]
    assert deferred.endswith("  deferred: not implemented yet")


def test_plugins_honours_the_block_list(run_cli: RunCli) -> None:
    document = json_of(run_cli("plugins", "--json", env={"BLAMEQUEUE_DISABLE_PLUGINS": "memory"}))
    assert "memory" not in {plugin["name"] for plugin in document["plugins"]}
