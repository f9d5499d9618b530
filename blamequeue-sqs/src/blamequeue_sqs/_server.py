"""A throwaway SQS endpoint (moto's server on a free loopback port) and bench queues, for
``blamequeue bench --backend sqs`` and the tests.

Nothing here is part of the backend.  moto is not a dependency of ``blamequeue-sqs``: starting
the server without ``moto[server]`` installed raises :class:`MotoServerError` saying so.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

import attrs

from blamequeue_sqs._transport import NO_BOTOCORE_RETRIES, CountingClient

__all__ = [
    "BenchSetup",
    "MotoServer",
    "MotoServerError",
    "bench_setup",
    "create_queue_with_dlq",
    "free_port",
]

_START_TIMEOUT: Final = 30.0
_STOP_TIMEOUT: Final = 10.0
INSTALL_HINT: Final = "moto's server is not installed: pip install 'moto[server]'"
# moto accepts any credentials; boto3 only needs some.
FAKE_CREDENTIALS: Final = {
    "aws_access_key_id": "blamequeue",
    "aws_secret_access_key": "blamequeue",
    "region_name": "us-east-1",
}


class MotoServerError(RuntimeError):
    """The server could not be started."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """``python -m moto.server`` in a child process on a free loopback port.

    ::

        with MotoServer() as server:
            client = boto3.client("sqs", endpoint_url=server.endpoint, **FAKE_CREDENTIALS)
    """

    def __init__(self) -> None:
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start the server and wait until it accepts connections; returns its endpoint URL."""
        if self._process is not None:
            return self.endpoint
        if importlib.util.find_spec("moto") is None:
            raise MotoServerError(INSTALL_HINT)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise MotoServerError(
                        f"moto's server exited at start (status {process.returncode}); "
                        f"{INSTALL_HINT}"
                    ) from None
                if time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    raise MotoServerError(
                        f"moto's server did not listen on port {port} within {_START_TIMEOUT} s"
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def create_queue_with_dlq(
    client: Any, name: str, *, fifo: bool = False, max_receive_count: int = 5
) -> tuple[str, str]:
    """Create queue ``name`` and its dead-letter queue ``<name>-dlq``, joined by a
    RedrivePolicy of ``max_receive_count`` receives.  Returns ``(queue_url, dlq_url)``."""
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


@attrs.define(eq=False)
class BenchSetup:
    """What ``blamequeue bench --backend sqs`` runs on."""

    config: dict[str, Any]
    where: str
    requests: CountingClient
    cleanup: Callable[[], None]


def bench_setup(endpoint_url: str | None) -> BenchSetup:
    """Queues for the bench, on ``endpoint_url`` (credentials and region from the boto3
    chain), or on a moto server started here when it is ``None``.

    Every queue name the bench uses gets an SQS queue of its own, with a dead-letter queue
    (a templated ``queue_url`` and ``create_queues``).  ``cleanup()`` deletes them (or stops
    the server).
    """
    import boto3
    import botocore.config

    # As the backend makes its own: botocore tries once, so every request is counted once.
    one_try = botocore.config.Config(retries=dict(NO_BOTOCORE_RETRIES))
    server: MotoServer | None = None
    if endpoint_url is None:
        server = MotoServer()
        endpoint_url = server.start()
        raw = boto3.client("sqs", endpoint_url=endpoint_url, config=one_try, **FAKE_CREDENTIALS)
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
    # Sealing is on by default for a user; the sqs backend refuses to run without a key.
    seal = {"keys": {"bench": base64.b64encode(secrets.token_bytes(32)).decode("ascii")}}
    config = {
        "protocol": "sqs",
        "queue_url": template,
        "create_queues": True,
        "client": requests,
        "seal": seal,
    }

    def cleanup() -> None:
        if server is not None:
            server.stop()
            return
        try:
            urls = raw.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
            for url in urls:
                raw.delete_queue(QueueUrl=url)
        except Exception:  # best effort: the bench's result matters more
            pass

    where = f"sqs ({template}{', moto, temporary' if server is not None else ''})"
    return BenchSetup(config=config, where=where, requests=requests, cleanup=cleanup)
