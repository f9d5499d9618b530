"""``pip install blamequeue[redis]`` as a user meets it: the extra installed into a fresh
virtual environment from the run's wheelhouse of every distribution (nothing is published to an
index from here).  Slow-ish: installs for real."""

from __future__ import annotations

from pathlib import Path

from install_commands import checked_output, fresh_python, install


def test_the_redis_extra_installs_from_a_wheelhouse(
    wheelhouse: Path, tmp_path: Path, redis_url: str
) -> None:
    python = fresh_python(tmp_path / "venv")
    install(python, wheelhouse, "blamequeue[redis]")
    script = (
        "import anyio\n"
        "from blamequeue import Queue\n"
        "async def main():\n"
        f"    queue = Queue(backends={{'r': {{'protocol': 'redis', 'url': {redis_url!r}}}}},"
        " seal=False)\n"
        "    async with queue:\n"
        "        await queue.enqueue('q', 'hello')\n"
        "        print('size', await queue.size('q'))\n"
        "anyio.run(main)\n"
    )
    assert checked_output(python, "-c", script).strip() == "size 1"
