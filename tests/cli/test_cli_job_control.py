"""Job control from the command line, as a user runs it: ``promote``, ``change-delay``,
``change-priority``, ``update-payload``, ``rerun``, ``logs``, the progress ``job`` shows, and
``enqueue --job-id / --lifo``.  A job that is in a state an edit does not apply to is told
apart from an unknown one (exit 1 and the state, or exit 3), and a backend that cannot do it
refuses with its code; none of it prints a traceback."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_helpers import QUEUE, RunCli, command, environment, json_of, local_queue, seed

from blamequeue import Job, JobContext, JobInfo

UNKNOWN = "job-00000000000000000000000000"

#: Each job-control command with what follows JOB_ID on its command line.
COMMANDS: dict[str, tuple[str, ...]] = {
    "promote": (),
    "change-delay": ("30",),
    "change-priority": ("5",),
    "update-payload": ('{"n": 9}',),
    "rerun": (),
    "logs": (),
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


def delayed_job(db: Path, seconds: float = 3600.0) -> str:
    async def go() -> str:
        async with local_queue(db) as q:
            return await q.enqueue(QUEUE, {"n": 0}, delay=seconds)

    return anyio.run(go)


def info_of(db: Path, job_id: str) -> JobInfo:
    async def go() -> JobInfo | None:
        async with local_queue(db) as q:
            return await q.job_info(job_id)

    info = anyio.run(go)
    assert info is not None
    return info


async def _chatty(job: Job, ctx: JobContext) -> None:
    await ctx.log("fetching the report")
    await ctx.progress(40, {"step": "upload"})
    await ctx.log("uploaded\nin two parts")
    await ctx.log("done")


def logged_job(db: Path) -> str:
    """A done job whose handler wrote three log lines and reported 40 % progress."""

    async def go() -> str:
        async with local_queue(db) as q:
            job_id = await q.enqueue(QUEUE, {"report": 7})
            await q.tick(QUEUE, _chatty, max=1)
            return job_id

    return anyio.run(go)


def assert_one_clear_line(result: subprocess.CompletedProcess[str], code: str) -> None:
    """The error as one line naming its code: no traceback, no path into the library."""
    assert f"error: [{code}] " in result.stderr
    for leak in ("Traceback", "site-packages", '.py"', 'File "'):
        assert leak not in result.stderr + result.stdout


def jsonfile_config(tmp_path: Path) -> Path:
    """A config whose only backend, the example ``jsonfile`` one, has no job edits, ids,
    lifo or records."""
    config = tmp_path / "queues.toml"
    config.write_text(
        'default_backend = "files"\n'
        "[backends.files]\n"
        'protocol = "jsonfile"\n'
        f'path = "{tmp_path / "jobs.json"}"\n'
    )
    return config


# -- edits that apply ------------------------------------------------------------------------
def test_promote_makes_a_delayed_job_due_now_once(run_cli: RunCli, db: Path) -> None:
    job_id = delayed_job(db)
    result = run_cli("promote", job_id, "--path", str(db))
    assert (result.returncode, result.stdout) == (0, f"job {job_id} is due now\n"), result.stderr
    assert info_of(db, job_id).job.available_at <= datetime.now(UTC)
    again = run_cli("promote", job_id, "--path", str(db), "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {
        "job_id": job_id,
        "backend": "default",
        "promoted": False,
        "state": "pending",
    }


def test_change_delay_priority_and_payload_edit_a_waiting_job(
    run_cli: RunCli, db: Path, tmp_path: Path
) -> None:
    job_id = delayed_job(db, seconds=5.0)
    before = datetime.now(UTC)
    result = run_cli("change-delay", job_id, "3600", "--path", str(db))
    assert (result.returncode, result.stdout) == (0, f"job {job_id} is due 3600 s from now\n")
    assert json_of(run_cli("change-priority", job_id, "-7", "--path", str(db), "--json")) == {
        "job_id": job_id,
        "backend": "default",
        "priority_changed": True,
    }
    piped = subprocess.run(
        command("update-payload", job_id, "-", "--path", str(db)),
        input='{"n": 9, "rush": true}',
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (piped.returncode, piped.stdout) == (0, f"job {job_id} has its new payload\n")
    info = info_of(db, job_id)
    assert (info.state, info.job.priority, info.job.payload) == (
        "pending",
        -7,
        {"n": 9, "rush": True},
    )
    assert before + timedelta(seconds=3590) < info.job.available_at


def test_rerun_puts_a_dead_job_back_with_attempts_reset(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, dead=1)["dead"]
    result = run_cli("rerun", job_id, "--path", str(db), "--json")
    assert json_of(result) == {"job_id": job_id, "backend": "default", "rerun": True}
    info = info_of(db, job_id)
    assert (info.state, info.job.attempts) == ("pending", 0)
    again = run_cli("rerun", job_id, "--path", str(db))
    assert again.returncode == 1
    assert again.stdout == (
        f"job {job_id} is pending: nothing changed (rerun applies only to a done, dead or "
        f"cancelled job)\n"
    )


# -- edits that do not apply, unknown jobs, refusals, bad input --------------------------------
@pytest.mark.parametrize("name", ["promote", "change-delay", "change-priority", "update-payload"])
def test_an_edit_of_a_finished_job_changes_nothing_and_says_its_state(
    run_cli: RunCli, db: Path, name: str
) -> None:
    [job_id] = seed(db, done=1)["done"]
    result = run_cli(name, job_id, *COMMANDS[name], "--path", str(db))
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"job {job_id} is done: nothing changed ({name} applies")
    assert result.stderr == ""
    info = info_of(db, job_id)
    assert (info.state, info.job.priority, info.job.payload["n"]) == ("done", 0, 0)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_an_unknown_job_exits_3_with_the_code(run_cli: RunCli, db: Path, name: str) -> None:
    seed(db, pending=1)
    result = run_cli(name, UNKNOWN, *COMMANDS[name], "--path", str(db))
    assert result.returncode == 3
    assert result.stdout == ""
    assert_one_clear_line(result, "queue/job-not-found")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_backend_that_cannot_refuses_with_its_code(
    run_cli: RunCli, tmp_path: Path, name: str
) -> None:
    config = jsonfile_config(tmp_path)
    job_id = run_cli("enqueue", QUEUE, "{}", "--config", str(config)).stdout.strip()
    result = run_cli(name, job_id, *COMMANDS[name], "--config", str(config))
    assert result.returncode == 1
    assert result.stdout == ""
    code = "queue/records-unsupported" if name == "logs" else "queue/job-edits-unsupported"
    assert_one_clear_line(result, code)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("update-payload", "{bad"), None),
        (("update-payload", '{"a": 1, "a": 2}'), "queue/bad-payload"),
        (("change-priority", str(2**40)), "queue/bad-argument"),
        (("change-priority", "high"), None),
        (("change-delay", "-1"), None),
    ],
)
def test_bad_input_is_a_usage_error_without_a_traceback(
    run_cli: RunCli, db: Path, args: tuple[str, ...], code: str | None
) -> None:
    job_id = delayed_job(db)
    name, value = args
    result = run_cli(name, job_id, value, "--path", str(db))
    assert result.returncode == 2
    if code is not None:
        assert_one_clear_line(result, code)
    assert "Traceback" not in result.stderr
    info = info_of(db, job_id)
    assert (info.job.priority, info.job.payload) == (0, {"n": 0})


# -- logs and progress -------------------------------------------------------------------------
def test_logs_prints_each_line_with_its_time_and_attempt(run_cli: RunCli, db: Path) -> None:
    job_id = logged_job(db)
    result = run_cli("logs", job_id, "--path", str(db))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split("  ", 2)[1:] for line in lines if not line.startswith(" ")] == [
        ["#1", "fetching the report"],
        ["#1", "uploaded"],
        ["#1", "done"],
    ]
    assert lines[2].strip() == "in two parts"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", lines[0].split("  ")[0])
    tail = run_cli("logs", job_id, "--path", str(db), "--tail", "2", "--json")
    document = json_of(tail)
    assert (document["job_id"], document["backend"]) == (job_id, "default")
    assert [(line["attempt"], line["message"]) for line in document["lines"]] == [
        (1, "uploaded\nin two parts"),
        (1, "done"),
    ]
    assert datetime.fromisoformat(document["lines"][0]["time"]).tzinfo is not None


def test_logs_of_a_job_that_wrote_none_says_so(run_cli: RunCli, db: Path) -> None:
    [job_id] = seed(db, pending=1)["pending"]
    result = run_cli("logs", job_id, "--path", str(db))
    assert (result.returncode, result.stdout) == (0, f"job {job_id} has no log lines\n")


def test_job_shows_the_kept_progress(run_cli: RunCli, db: Path) -> None:
    job_id = logged_job(db)
    [quiet] = seed(db, pending=1)["pending"]
    shown = run_cli("job", job_id, "--path", str(db))
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines() if line[:1] != " ")
    assert fields["progress"].startswith('40% {"step": "upload"} (')
    progress: dict[str, Any] = json_of(run_cli("job", job_id, "--path", str(db), "--json"))[
        "progress"
    ]
    assert (progress["percent"], progress["data"]) == (40, {"step": "upload"})
    assert datetime.fromisoformat(progress["time"]).tzinfo is not None
    assert json_of(run_cli("job", quiet, "--path", str(db), "--json"))["progress"] is None


# -- enqueue --job-id / --lifo -----------------------------------------------------------------
def test_enqueue_with_a_job_id_twice_stores_one_job(run_cli: RunCli, db: Path) -> None:
    first = run_cli("enqueue", QUEUE, '{"order": 42}', "--job-id", "order-42", "--path", str(db))
    assert (first.returncode, first.stdout) == (0, "order-42\n"), first.stderr
    again = run_cli(
        "enqueue", QUEUE, '{"order": 43}', "--job-id", "order-42", "--path", str(db), "--json"
    )
    assert json_of(again) == {"job_id": "order-42", "queue": QUEUE, "backend": "default"}
    info = info_of(db, "order-42")
    assert info.job.payload == {"order": 42}
    bad = run_cli("enqueue", QUEUE, "{}", "--job-id", "no spaces", "--path", str(db))
    assert bad.returncode == 2
    assert_one_clear_line(bad, "queue/bad-argument")


def test_enqueue_lifo_reaches_the_backend(run_cli: RunCli, tmp_path: Path) -> None:
    memory = run_cli("enqueue", QUEUE, "{}", "--lifo", env={"BLAMEQUEUE_PROTOCOL": "memory"})
    assert memory.returncode == 0, memory.stderr
    assert memory.stdout.startswith("job-")
    config = str(jsonfile_config(tmp_path))
    for flags, code in [
        (("--lifo",), "queue/lifo-unsupported"),
        (("--job-id", "order-42"), "queue/job-ids-unsupported"),
    ]:
        refused = run_cli("enqueue", QUEUE, "{}", *flags, "--config", config)
        assert refused.returncode == 1
        assert_one_clear_line(refused, code)
