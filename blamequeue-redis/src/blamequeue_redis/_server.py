"""A throwaway ``redis-server`` on a free loopback port, for ``blamequeue bench`` and tests.

Nothing here is part of the backend: it starts the Debian/upstream ``redis-server`` binary as a
child process with persistence off (unless told otherwise), in a directory of its own, waits
until it answers ``PING`` and stops it again.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

__all__ = ["RedisServer", "RedisServerError", "bench_cleanup", "free_port"]

_START_TIMEOUT: Final = 10.0
_STOP_TIMEOUT: Final = 10.0
INSTALL_HINT: Final = (
    "redis-server is not on PATH; install it (Debian/Ubuntu: apt-get install redis-server, "
    "macOS: brew install redis)"
)


class RedisServerError(RuntimeError):
    """The server could not be started."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.  With ``cluster_bus``, port
    + 10000 (a cluster node's bus port) is free too, so the port is at most 55535."""
    if not cluster_bus:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(200):
        port = random.randint(20_000, 55_535)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RedisServerError("found no free port pair (port, port + 10000) for a cluster node")


def _answer(port: int, command: bytes) -> bytes | None:
    """One raw RESP exchange with the server, or None when it does not answer yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(command)
            return sock.recv(65536)
    except OSError:
        return None


class RedisServer:
    """``redis-server`` on ``127.0.0.1:<port>``; ``args`` are extra config (``--requirepass x``).

    Use it as a context manager, or call :meth:`start` / :meth:`stop`; :meth:`restart` keeps
    the port and the directory (and so, with persistence on, the data).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
        directory: str | os.PathLike[str] | None = None,
        executable: str = "redis-server",
    ) -> None:
        found = shutil.which(executable)
        if found is None:
            raise RedisServerError(INSTALL_HINT)
        self.executable = found
        self.args = tuple(args)
        self.port = port if port is not None else free_port(cluster_bus=self._clustered)
        self._own_directory = directory is None
        self.directory = Path(
            tempfile.mkdtemp(prefix="blamequeue-redis-") if directory is None else directory
        )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def _clustered(self) -> bool:
        return "--cluster-enabled" in self.args

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        log = self.directory / "redis.log"
        command = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--logfile",
            str(log),
            *self.args,
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            reply = _answer(self.port, b"PING\r\n")
            # -NOAUTH: up, with a password.  -LOADING: up, still reading its data.
            if reply is not None and reply.startswith((b"+PONG", b"-NOAUTH")):
                return
            time.sleep(0.02)
        self.stop()
        details = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RedisServerError(
            f"redis-server on port {self.port} did not come up: {' '.join(command)}\n{details}"
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def kill(self) -> None:
        """Stop at once (SIGKILL): no shutdown save, like a crash."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop and remove the directory, if this object made it."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


def bench_cleanup(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (what ``blamequeue bench --url`` wrote)."""
    import redis
    import redis.cluster

    with redis.Redis.from_url(url) as probe:
        cluster = bool(probe.info("cluster").get("cluster_enabled"))
    client: redis.Redis | redis.cluster.RedisCluster = (
        redis.cluster.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
    )
    with client:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)  # one at a time: on a cluster the keys live in many slots
