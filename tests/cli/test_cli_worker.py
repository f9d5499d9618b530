"""``blamequeue worker MODULE:HANDLER``: a separate process working a SQLite queue, stopped by
a signal the way a process manager stops it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from blamequeue import Queue

RunCli = Callable[..., subprocess.CompletedProcess[str]]
SpawnCli = Callable[..., subprocess.Popen[str]]
WaitUntil = Callable[..., None]

DEADLINE = 20.0

TASKS = textwrap.dedent(
    """
    import pathlib

    import anyio

    HERE = pathlib.Path(__file__).parent
    DONE = HERE / "done.txt"


    def _record(text):
        with DONE.open("a") as f:
            f.write(text + "\\n")


    async def record(job, ctx):
        _record(str(job.payload["n"]))


    def record_sync(job, ctx):
        _record(f"sync {job.payload['n']}")


    async def always_fails(job, ctx):
        raise ValueError(f"cannot handle {job.payload['n']}")


    async def wait_for_go(job, ctx):
        (HERE / "started.txt").write_text(job.id)
        while not (HERE / "go.txt").exists():
            await anyio.sleep(0.02)
        _record(f"finished {job.payload['n']}")


    not_a_handler = 42


    def takes_one_argument(job):
        pass
    """
)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A project directory with a handler module, as a user would have."""
    (tmp_path / "tasks.py").write_text(TASKS)
    return tmp_path


def _queue(db: Path) -> Queue:
    return Queue(backends={"local": {"protocol": "local", "path": str(db)}})


def enqueue(db: Path, payloads: list[Any], **options: Any) -> list[str]:
    async def go() -> list[str]:
        async with _queue(db) as queue:
            return await queue.enqueue_many("q", payloads, **options)

    return anyio.run(go)


def sizes(db: Path) -> tuple[int, int]:
    """(live jobs, dead-lettered jobs) of queue ``q``."""

    async def go() -> tuple[int, int]:
        async with _queue(db) as queue:
            return await queue.size("q"), await queue.dlq_size("q")

    return anyio.run(go)


def done_lines(app: Path) -> list[str]:
    path = app / "done.txt"
    return path.read_text().splitlines() if path.exists() else []


def stderr_of(app: Path, n: int = 0) -> str:
    return (app / f"stderr-{n}.txt").read_text()


def stop(proc: subprocess.Popen[str], signum: int = signal.SIGTERM) -> int:
    proc.send_signal(signum)
    return proc.wait(timeout=DEADLINE)


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_worker_processes_the_queue_and_stops_gracefully_on_sigterm(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil, loop: str
) -> None:
    db = app / "jobs.db"
    enqueue(db, [{"n": n} for n in range(5)])

    proc = spawn_cli("worker", "tasks:record", "--queue", "q", "--path", str(db), "--loop", loop)
    wait_until(lambda: len(done_lines(app)) == 5, "the worker to run 5 jobs")

    assert stop(proc) == 0
    assert sorted(done_lines(app)) == ["0", "1", "2", "3", "4"]
    assert sizes(db) == (0, 0)
    err = stderr_of(app)
    assert "SIGTERM received" in err
    assert "5 processed (5 succeeded, 0 failed, 0 to the DLQ)" in err


def test_worker_lets_a_running_handler_finish_after_sigint(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "jobs.db"
    enqueue(db, [{"n": 1}])

    proc = spawn_cli("worker", "tasks:wait_for_go", "--queue", "q", "--path", str(db))
    wait_until((app / "started.txt").exists, "the handler to start")
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: "SIGINT received" in stderr_of(app), "the worker to see the signal")
    (app / "go.txt").write_text("go")  # only now may the running handler finish

    assert proc.wait(timeout=DEADLINE) == 0
    assert done_lines(app) == ["finished 1"]
    assert sizes(db) == (0, 0)
    assert "1 running handler(s)" in stderr_of(app)


def test_worker_a_second_signal_cancels_running_handlers_and_releases_their_jobs(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "jobs.db"
    enqueue(db, [{"n": 1}])

    proc = spawn_cli("worker", "tasks:wait_for_go", "--queue", "q", "--path", str(db))
    wait_until((app / "started.txt").exists, "the handler to start")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM received" in stderr_of(app), "the worker to see the signal")

    assert stop(proc) == 130
    assert done_lines(app) == []
    assert sizes(db) == (1, 0)  # back to pending, not lost and not failed
    assert "1 released back to pending" in stderr_of(app)


def test_worker_runs_a_plain_def_handler(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "jobs.db"
    enqueue(db, [{"n": 7}])

    proc = spawn_cli("worker", "tasks:record_sync", "--queue", "q", "--path", str(db))
    wait_until(lambda: done_lines(app) == ["sync 7"], "the sync handler")

    assert stop(proc) == 0


def test_worker_logs_failures_and_reports_dead_letters(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "jobs.db"
    enqueue(db, [{"n": 3}], max_attempts=1)

    proc = spawn_cli("worker", "tasks:always_fails", "--queue", "q", "--path", str(db))
    wait_until(lambda: sizes(db) == (0, 1), "the job to reach the dead-letter queue")

    assert stop(proc) == 0
    err = stderr_of(app)
    assert "ValueError: cannot handle 3" in err
    assert "it goes to the dead-letter queue" in err
    assert "1 failed, 1 to the DLQ" in err


def test_worker_log_format_json_writes_one_object_per_line(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "jobs.db"
    [job_id] = enqueue(db, [{"n": 3}], max_attempts=1)

    options = ("--path", str(db), "--log-format", "json")
    proc = spawn_cli("worker", "tasks:always_fails", "--queue", "q", *options)
    wait_until(lambda: sizes(db) == (0, 1), "the job to reach the dead-letter queue")

    assert stop(proc) == 0
    lines = [json.loads(line) for line in stderr_of(app).splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    [failed] = [line for line in lines if line["level"] == "WARNING"]
    fields = {key: failed[key] for key in ("job_id", "queue", "attempt", "backend")}
    assert fields == {"job_id": job_id, "queue": "q", "attempt": 1, "backend": "default"}
    assert "ValueError: cannot handle 3" in failed["exception"]
    assert "1 to the DLQ" in lines[-1]["message"]


def test_worker_takes_the_backend_from_blamequeue_env(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "env.db"
    enqueue(db, [{"n": 1}])

    proc = spawn_cli(
        "worker", "tasks:record", "--queue", "q", env={"BLAMEQUEUE_LOCAL_PATH": str(db)}
    )
    wait_until(lambda: done_lines(app) == ["1"], "the job")

    assert stop(proc) == 0


def test_worker_takes_a_backend_config_as_json(
    app: Path, spawn_cli: SpawnCli, wait_until: WaitUntil
) -> None:
    db = app / "json.db"
    enqueue(db, [{"n": 1}])
    config = f'{{"protocol": "local", "path": "{db}"}}'

    proc = spawn_cli("worker", "tasks:record", "--queue", "q", "--backend-config", config)
    wait_until(lambda: done_lines(app) == ["1"], "the job")

    assert stop(proc) == 0


def test_worker_with_a_missing_module_exits_2_and_says_so(app: Path, run_cli: RunCli) -> None:
    result = run_cli("worker", "no_such_module:handler", "--queue", "q", cwd=app)

    assert result.returncode == 2
    assert "error: cannot import module 'no_such_module'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tasks:nope", "module 'tasks'"),
        ("tasks:not_a_handler", "tasks:not_a_handler is not callable"),
        ("tasks:takes_one_argument", "cannot be called as handler(job, ctx)"),
        ("tasks", "MODULE:OBJECT"),
    ],
)
def test_worker_with_an_unusable_handler_exits_2(
    app: Path, run_cli: RunCli, target: str, message: str
) -> None:
    result = run_cli("worker", target, "--queue", "q", cwd=app)

    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize("debug", [(), ("--debug",)], ids=["one-line", "debug"])
def test_an_error_at_import_of_the_module_is_one_line_or_with_debug_its_traceback(
    app: Path, run_cli: RunCli, debug: tuple[str, ...]
) -> None:
    (app / "broken.py").write_text("import os\nraise KeyError(os.sep + 'redis://:pw@host')\n")

    result = run_cli(*debug, "worker", "broken:handler", "--queue", "q", cwd=app)

    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: importing module 'broken' raised KeyError: ")
    assert f"{app / 'broken.py'}:2" in line  # where, in the user's code
    assert "pw@" not in result.stderr  # the URL's password is masked
    if debug:
        assert "Traceback" in result.stderr
        assert 'broken.py", line 2, in <module>' in result.stderr
    else:
        assert result.stderr.count("\n") == 1  # no traceback: one line
        assert "blamequeue --debug" in line


def test_with_log_format_json_the_final_error_is_one_json_object_with_its_code(
    app: Path, run_cli: RunCli
) -> None:
    env = {"BLAMEQUEUE_PROTOCOL": "nope"}
    result = run_cli("worker", "tasks:record", "--queue", "q", "--log-format", "json", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1  # the one line said
    error = json.loads(result.stderr)
    assert (error["level"], error["logger"]) == ("ERROR", "blamequeue.cli")
    assert (error["code"], error["exit_code"]) == ("queue/invalid-config", 2)
    assert error["message"].startswith("[queue/invalid-config] ")
    assert "exception" not in error  # no traceback without --debug


def test_with_log_format_json_and_debug_the_traceback_is_a_field_of_the_error(
    app: Path, run_cli: RunCli
) -> None:
    (app / "broken.py").write_text("import os\nraise KeyError(os.sep + 'redis://:pw@host')\n")

    options = ("--queue", "q", "--log-format", "json")
    result = run_cli("--debug", "worker", "broken:handler", *options, cwd=app)

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1  # the traceback too is inside the one line
    error = json.loads(result.stderr)
    assert error["message"].startswith("importing module 'broken' raised KeyError: ")
    assert (error["exit_code"], "code" in error) == (1, False)  # not a QueueError
    assert 'broken.py", line 2, in <module>' in error["exception"]
    assert "pw@" not in result.stderr


def test_worker_with_an_invalid_config_exits_2(app: Path, run_cli: RunCli) -> None:
    result = run_cli("worker", "tasks:record", "--queue", "q", env={"BLAMEQUEUE_PROTOCOL": "nope"})

    assert result.returncode == 2
    assert "error: [queue/invalid-config]" in result.stderr


def test_worker_with_invalid_backend_config_json_exits_2(app: Path, run_cli: RunCli) -> None:
    result = run_cli("worker", "tasks:record", "--queue", "q", "--backend-config", "{nope")

    assert result.returncode == 2
    assert "not valid JSON" in result.stderr


def test_worker_whose_backend_cannot_open_exits_1_with_the_error_code(
    app: Path, run_cli: RunCli
) -> None:
    db = app / "missing-dir" / "jobs.db"

    result = run_cli("worker", "tasks:record", "--queue", "q", "--path", str(db))

    assert result.returncode == 1
    assert "error: [queue/backend-unavailable]" in result.stderr


TASK_APP = textwrap.dedent(
    """
    import dataclasses
    import pathlib

    from blamequeue import Queue, Task

    HERE = pathlib.Path(__file__).parent
    queue = Queue(backends={"local": {"protocol": "local", "path": str(HERE / "jobs.db")}})


    @dataclasses.dataclass
    class Greeting:
        name: str


    @queue.register
    class Greet(Task[Greeting]):
        queue = "q"

        def handle(self, payload, ctx):
            with (HERE / "done.txt").open("a") as f:
                f.write(f"{type(payload).__name__} {payload.name} {ctx.job.context}\\n")
    """
)


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_worker_runs_the_tasks_of_a_queue_object(
    tmp_path: Path, spawn_cli: SpawnCli, wait_until: WaitUntil, loop: str
) -> None:
    (tmp_path / "taskapp.py").write_text(TASK_APP)
    db = tmp_path / "jobs.db"
    dispatch = textwrap.dedent(
        """
        import anyio, taskapp

        async def main():
            async with taskapp.queue:
                await taskapp.Greet.dispatch(taskapp.Greeting(name="ada"))
                await taskapp.queue.job("Greet", {"name": "bo"}).with_context(by=7).dispatch()

        anyio.run(main)
        """
    )
    subprocess.run([sys.executable, "-c", dispatch], cwd=tmp_path, check=True, timeout=DEADLINE)
    proc = spawn_cli(
        "worker",
        "taskapp:queue",
        "--queue",
        "q",
        "--path",
        str(db),
        "--loop",
        loop,
        cwd=tmp_path,
    )
    wait_until(lambda: len(done_lines(tmp_path)) == 2, "the worker to run 2 tasks")
    assert stop(proc) == 0
    assert sorted(done_lines(tmp_path)) == ["Greeting ada {}", "Greeting bo {'by': 7}"]
