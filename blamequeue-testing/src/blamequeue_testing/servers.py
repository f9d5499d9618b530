"""Throwaway servers on free loopback ports: ``redis-server`` and moto's SQS server.

They serve ``blamequeue bench`` (through the ``blamequeue_register_dev_servers`` hook of this
distribution's plugin), blamequeue's own tests, and any downstream suite that wants a real server
as a fixture::

    import pytest
    from blamequeue_testing.servers import RedisServer

    @pytest.fixture(scope="session")
    def redis_url():
        with RedisServer() as server:      # started here, stopped and removed at the end
            yield server.url

Nothing here is imported by ``import blamequeue_testing``, and nothing here imports redis-py,
boto3 or moto until a function needs them: :class:`RedisServer` needs only the
``redis-server`` binary on ``PATH``; :class:`MotoServer` needs ``moto[server]``
(``pip install 'blamequeue-testing[sqs]'``).  A server that cannot start raises
:class:`RedisServerError` / :class:`MotoServerError` (``queue/backend-unavailable``, not
retryable) saying what to install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from blamequeue.errors import BackendUnavailableError

__all__ = [
    "MOTO_CREDENTIALS",
    "MOTO_INSTALL_HINT",
    "REDIS_INSTALL_HINT",
    "DevServer",
    "MotoServer",
    "MotoServerError",
    "RedisServer",
    "RedisServerError",
    "create_queue_with_dlq",
    "free_port",
    "redis_dev_server",
    "sqs_dev_server",
]

_REDIS_START_TIMEOUT: Final = 10.0
_MOTO_START_TIMEOUT: Final = 30.0
_STOP_TIMEOUT: Final = 10.0

REDIS_INSTALL_HINT: Final = (
    "redis-server is not on PATH; install it (Debian/Ubuntu: apt-get install redis-server, "
    "macOS: brew install redis)"
)
MOTO_INSTALL_HINT: Final = (
    "moto's server is not installed: pip install 'blamequeue-testing[sqs]' (or 'moto[server]')"
)
MOTO_CREDENTIALS: Final = {
    "aws_access_key_id": "blamequeue",
    "aws_secret_access_key": "blamequeue",
    "region_name": "us-east-1",
}
"""Keyword arguments of ``boto3.client`` for a :class:`MotoServer`: moto accepts any
credentials, boto3 only needs some."""


class RedisServerError(BackendUnavailableError):
    """``redis-server`` could not be started; the message says why (and what to install)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class MotoServerError(BackendUnavailableError):
    """moto's server could not be started; the message says why (and what to install)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.  With ``cluster_bus``, port
    + 10000 (a Redis Cluster node's bus port) is free too, so the port is at most 55535."""
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
    """``redis-server`` on ``127.0.0.1:<port>``, persistence off unless ``args`` turn it on;
    ``args`` are extra configuration (``["--requirepass", "x"]``).

    Use it as a context manager, or call :meth:`start` / :meth:`stop`; :meth:`restart` keeps
    the port and the directory (and so, with persistence on, the data).  Without ``directory``
    it makes a temporary one, removed by :meth:`cleanup`.  Raises :class:`RedisServerError`
    when the binary is missing (at construction) or the server does not come up (at start).
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
            raise RedisServerError(REDIS_INSTALL_HINT)
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
        """Start the server and wait until it answers ``PING``; a no-op while it runs."""
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
        deadline = time.monotonic() + _REDIS_START_TIMEOUT
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
        """Stop with ``SIGTERM`` (a shutdown save when persistence is on)."""
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

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


class MotoServer:
    """``python -m moto.server`` in a child process on a free loopback port::

        with MotoServer() as server:
            sqs = boto3.client("sqs", endpoint_url=server.endpoint, **MOTO_CREDENTIALS)

    Raises :class:`MotoServerError` at start when ``moto[server]`` is missing or the server
    does not listen in time.
    """

    def __init__(self) -> None:
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start the server and wait until it accepts connections; returns its endpoint URL."""
        if self._process is not None:
            return self.endpoint
        if importlib.util.find_spec("moto") is None:
            raise MotoServerError(MOTO_INSTALL_HINT)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _MOTO_START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise MotoServerError(
                        f"moto's server exited at start (status {process.returncode}); "
                        f"{MOTO_INSTALL_HINT}"
                    ) from None
                if time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    raise MotoServerError(
                        f"moto's server did not listen on port {port} within "
                        f"{_MOTO_START_TIMEOUT} s"
                    ) from None
                time.sleep(0.05)
        self._process = process
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def create_queue_with_dlq(
    client: Any, name: str, *, fifo: bool = False, max_receive_count: int = 5
) -> tuple[str, str]:
    """Create SQS queue ``name`` and its dead-letter queue ``<name>-dlq`` through the boto3
    ``client``, joined by a RedrivePolicy of ``max_receive_count`` receives.  Returns
    ``(queue_url, dlq_url)``."""
    suffix = ".fifo" if fifo else ""
    attributes = {"FifoQueue": "true"} if fifo else {}
    dlq_url = client.create_queue(QueueName=f"{name}-dlq{suffix}", Attributes=attributes)[
        "QueueUrl"
    ]
    arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    policy = {
        "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
        "maxReceiveCount": str(max_receive_count),
    }
    queue_url = client.create_queue(
        QueueName=f"{name}{suffix}",
        Attributes={**attributes, "RedrivePolicy": json.dumps(policy)},
    )["QueueUrl"]
    return str(queue_url), str(dlq_url)


@attrs.frozen(kw_only=True)
class DevServer:
    """A server set up for a development tool (what a ``blamequeue_register_dev_servers``
    factory returns).

    ``config`` is a backend config (``protocol`` and its connection options; no ``seal``: the
    tool adds its own), ``description`` one line naming the server, ``cleanup()`` stops what
    was started or deletes what the tool wrote, and ``requests`` counts the backend's requests
    when it can (for SQS, a :class:`blamequeue_sqs.CountingClient`), else ``None``.
    """

    config: dict[str, Any]
    description: str
    cleanup: Callable[[], None]
    requests: Any = None


def _delete_under_prefix(url: str, prefix: str) -> None:
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


def redis_dev_server(url: str | None = None) -> DevServer:
    """The redis backend's server for ``blamequeue bench``: the one at ``url``, with keys under
    a prefix of their own that ``cleanup()`` deletes (redis-py needed), or, when ``url`` is
    ``None``, a :class:`RedisServer` started here that ``cleanup()`` stops and removes."""
    if url is not None:
        prefix = f"blamequeue-bench:{secrets.token_hex(4)}"
        config = {"protocol": "redis", "url": url, "key_prefix": prefix}

        def delete_keys() -> None:
            _delete_under_prefix(url, prefix)

        where = f"redis ({urlsplit(url).hostname}, key prefix {prefix})"
        return DevServer(config=config, description=where, cleanup=delete_keys)
    server = RedisServer()
    server.start()
    return DevServer(
        config={"protocol": "redis", "url": server.url},
        description=f"redis ({server.url}, temporary)",
        cleanup=server.cleanup,
    )


# One try per request, as the sqs backend makes its own clients: so every request is counted
# once, and the backend's retry policy is the only one retrying.
_ONE_TRY: Final = {"mode": "standard", "total_max_attempts": 1}


def sqs_dev_server(endpoint_url: str | None = None) -> DevServer:
    """The sqs backend's queues for ``blamequeue bench``: on ``endpoint_url`` (credentials and
    region from the boto3 chain), or on a :class:`MotoServer` started here when it is ``None``.

    Every queue name the tool uses gets an SQS queue of its own with a dead-letter queue (a
    templated ``queue_url`` and ``create_queues``), reached through a
    :class:`blamequeue_sqs.CountingClient` (``requests``).  ``cleanup()`` deletes the queues,
    or stops the server.
    """
    import boto3
    import botocore.config

    from blamequeue_sqs import CountingClient

    one_try = botocore.config.Config(retries=dict(_ONE_TRY))
    server: MotoServer | None = None
    if endpoint_url is None:
        server = MotoServer()
        endpoint_url = server.start()
        raw = boto3.client("sqs", endpoint_url=endpoint_url, config=one_try, **MOTO_CREDENTIALS)
    else:
        raw = boto3.client("sqs", endpoint_url=endpoint_url, config=one_try)
    prefix = f"blamequeue-bench-{secrets.token_hex(4)}"
    try:
        # One queue made here tells the URL layout (account) the others follow.
        first_url, _dlq_url = create_queue_with_dlq(raw, f"{prefix}-bench-process")
    except BaseException:
        if server is not None:
            server.stop()
        raise
    template = first_url.rsplit("/", 1)[0] + f"/{prefix}-{{queue}}"
    requests = CountingClient(raw)
    config = {"protocol": "sqs", "queue_url": template, "create_queues": True, "client": requests}

    def cleanup() -> None:
        if server is not None:
            server.stop()
            return
        try:
            urls = raw.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
            for url in urls:
                raw.delete_queue(QueueUrl=url)
        except Exception:  # best effort: the tool's result matters more
            pass

    where = f"sqs ({template}{', moto, temporary' if server is not None else ''})"
    return DevServer(config=config, description=where, cleanup=cleanup, requests=requests)
