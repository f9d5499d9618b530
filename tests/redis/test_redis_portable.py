"""The redis backend works without any private name of another library.

``import blamequeue_redis`` imports no private module of redis-py or pynacl, and with every one
of them made unimportable (as a release that moved them would leave things) a queue still
enqueues, leases and settles against a real redis-server, accelerated where the accelerators'
probes still pass and through the portable paths where they do not, or where
``BLAMEQUEUE_PORTABLE=1`` says so.  The portable paths also pass a representative part of the
redis tests and the conformance suite on their own (asyncio: on trio the transport uses
redis-py's sync client, and no accelerator of its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from blamequeue._accelerators import PORTABLE_ENV

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: redis-py and pynacl are imported first (their own private
# modules are theirs to use), then every private module of theirs is made unimportable, and
# the json C encoder is taken away, before blamequeue is imported at all.
_BLOCKED = textwrap.dedent(
    """
    import importlib.abc, json.encoder, sys
    import anyio, redis, redis.asyncio, nacl.bindings, nacl.secret

    PRIVATE = ("redis._", "nacl._")
    asked = []

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith(PRIVATE):
                asked.append(name)
                raise ImportError(f"{name} is private to its library")
            return None

    for name in [name for name in sys.modules if name.startswith(PRIVATE)]:
        sys.modules[name] = None  # an import of it now raises ImportError
    sys.meta_path.insert(0, Refuse())
    json.encoder.c_make_encoder = None  # as on a Python without _json

    import blamequeue_redis
    from blamequeue import Queue
    from blamequeue._accelerators import json_encoder, secretbox_batch, secretbox_open
    from blamequeue._codec import _ENCODER
    from blamequeue_redis._accelerators import stream_takeover

    async def main(url):
        seal = {"keys": {"k1": "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE="}}
        config = {"protocol": "redis", "url": url, "seal": seal}
        async with Queue(backends={"r": config}) as queue:
            await queue.enqueue("q", {"n": 0})
            await queue.enqueue_many("q", [{"n": 1}, {"n": 2}])
            seen = []

            async def handle(job, ctx):
                seen.append(job.payload["n"])

            result = await queue.tick("q", handle)
            assert (result.leased, sorted(seen)) == (3, [0, 1, 2]), (result, seen)
            assert await queue.tick("q", handle) is not None
        assert secretbox_batch() is None and secretbox_open() is None
        assert json_encoder(_ENCODER) is None
        found = stream_takeover._found
        print("takeover", bool(found) and None not in found.values())
        print("asked", sorted(set(asked)))

    anyio.run(main, sys.argv[1])
    """
)


def _run(code: str, *args: str, portable: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != PORTABLE_ENV}
    if portable:
        env[PORTABLE_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("portable", [False, True], ids=["probed", "portable"])
def test_a_queue_works_with_every_private_module_of_redis_py_and_pynacl_unimportable(
    redis_url: str, portable: bool
) -> None:
    run = _run(_BLOCKED, redis_url, portable=portable)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # The takeover reaches private attributes, never a private module: its probe still passes
    # unless BLAMEQUEUE_PORTABLE is set.
    assert lines[0] == f"takeover {not portable}"
    # Nothing asked for a private module once they were gone.
    assert lines[1] == "asked []"


def test_importing_blamequeue_redis_probes_nothing_and_imports_no_private_module() -> None:
    code = textwrap.dedent(
        """
        import sys
        before = {name for name in sys.modules if name.startswith(("redis._", "nacl._"))}
        import redis, nacl.bindings
        theirs = {name for name in sys.modules if name.startswith(("redis._", "nacl._"))}
        import blamequeue_redis, blamequeue_redis._backend, blamequeue_redis._wire
        from blamequeue_redis import _accelerators as redis_acc
        from blamequeue import _accelerators as core_acc
        ours = {name for name in sys.modules if name.startswith(("redis._", "nacl._"))}
        assert ours == theirs, ours - theirs
        probed = [redis_acc.stream_takeover, redis_acc.loop_idle, core_acc.json_encoder,
                  core_acc.secretbox_batch, core_acc.secretbox_open]
        assert not any(acc._found for acc in probed), [acc.name for acc in probed if acc._found]
        """
    )
    run = _run(code, portable=False)
    assert run.returncode == 0, run.stderr


def test_the_portable_paths_pass_the_redis_tests_on_their_own() -> None:
    # A representative part (~15 s): the conformance suite, blocking waits and their
    # cancellation, server restarts; on asyncio, where the accelerators are.
    tests = [
        "tests/conformance/test_redis.py",
        "tests/redis/test_redis_wait_lease.py",
        "tests/redis/test_redis_cancel.py",
        "tests/reliability/test_redis_restart.py",
    ]
    env = {**os.environ, PORTABLE_ENV: "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-k", "asyncio", *tests],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
