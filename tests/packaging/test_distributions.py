"""Each distribution installs and imports on its own, as a user meets it.

Installs into fresh virtual environments (no access to the test venv's packages) from the
run's wheelhouse of every distribution; slow-ish (seconds each) but it is the only way to know
that ``blamequeue-core`` alone works and what each distribution brings.
"""

from __future__ import annotations

from pathlib import Path

from install_commands import checked_output, fresh_python, install, pip


def test_core_installs_alone_then_local_adds_the_sqlite_backend_then_the_meta_distribution(
    wheelhouse: Path, tmp_path: Path
) -> None:
    python = fresh_python(tmp_path / "venv")
    install(python, wheelhouse, "blamequeue-core")
    script = (
        "import blamequeue, blamequeue.abc, blamequeue.errors\n"
        "from blamequeue import Queue, QueueError\n"
        "try:\n"
        "    Queue(backends={'a': {'protocol': 'local'}})\n"
        "except QueueError as e:\n"
        "    print(e.code, e.message)\n"
    )
    out = checked_output(python, "-c", script)
    assert out.startswith("queue/invalid-config")
    assert "'local'" in out

    install(python, wheelhouse, "blamequeue-local")
    out = checked_output(
        python,
        "-c",
        "from blamequeue import Queue; import blamequeue_local;"
        "Queue(backends={'a': {'protocol': 'local'}}); print('local ok')",
    )
    assert "local ok" in out
    assert "0.1.0" in checked_output(python, "-m", "blamequeue._cli", "--version")

    # The meta distribution is core and local, nothing more.
    install(python, wheelhouse, "blamequeue")
    out = checked_output(*pip(python, "list", "--format=freeze"))
    names = {line.split("==")[0].lower() for line in out.splitlines()}
    assert {"blamequeue", "blamequeue-core", "blamequeue-local"} <= names
    assert "blamequeue-testing" not in names


def test_testing_distribution_brings_the_memory_protocol(wheelhouse: Path, tmp_path: Path) -> None:
    python = fresh_python(tmp_path / "venv")
    install(python, wheelhouse, "blamequeue-core", "blamequeue-testing")
    out = checked_output(
        python,
        "-c",
        "from blamequeue import Queue; from blamequeue_testing import VirtualClock;"
        "Queue(backends={'m': {'protocol': 'memory'}}, clock=VirtualClock()); print('memory ok')",
    )
    assert "memory ok" in out
    # The throwaway servers import redis-py, boto3 and moto only when used; none is installed.
    out = checked_output(
        python,
        "-c",
        "import sys; import blamequeue_testing.servers as s; s.free_port();"
        "print(sorted(set(sys.modules) & {'redis', 'boto3', 'moto', 'blamequeue_redis'}))",
    )
    assert out.strip() == "[]"
