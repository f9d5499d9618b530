"""A real SQS endpoint for the tests: moto's server on a free loopback port, in a subprocess.

The backend talks to it through boto3 exactly as to AWS (HTTP, signed requests with fake
credentials).  One server serves the whole session (the conformance module and ``tests/sqs``
share it); every test makes queues with names of its own.  moto missing is a failure, never a
skip: ``pip install 'moto[server]'`` (the ``dev`` extra has it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from blamequeue_testing.servers import MotoServer, create_queue_with_dlq

__all__ = ["REGION", "SEAL", "SqsQueues", "client", "make_queues", "sqs_endpoint"]

REGION = "us-east-1"
SEAL = {"keys": {"test": "bHUvC5Kq0m2b3V3l8QH0pCqWz8m4m6x4yJ2o7b1r5dQ="}}
_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


class _Shared:
    """The one server of the session, whichever module asks for it first."""

    server: MotoServer | None = None
    users = 0


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """The endpoint URL of moto's SQS server, with fake AWS credentials in the environment."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _CREDENTIALS.items():
            patch.setenv(name, value)
        patch.delenv("AWS_PROFILE", raising=False)
        if _Shared.server is None:
            server = MotoServer()
            server.start()  # raises, failing the tests, when moto[server] is missing
            _Shared.server = server
        _Shared.users += 1
        try:
            yield _Shared.server.endpoint
        finally:
            _Shared.users -= 1
            if _Shared.users == 0:
                _Shared.server.stop()
                _Shared.server = None


def client(endpoint: str) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=endpoint, region_name=REGION)


@attrs.frozen
class SqsQueues:
    """A standard queue with a RedrivePolicy dead-letter queue, and a FIFO queue with one."""

    endpoint: str
    url: str
    dlq_url: str
    fifo_url: str
    fifo_dlq_url: str

    def config(self, **options: Any) -> dict[str, Any]:
        """A backend config on the standard queue (sealed with a test key)."""
        return {
            "protocol": "sqs",
            "queue_url": self.url,
            "endpoint_url": self.endpoint,
            "region": REGION,
            "dlq_scan_wait": 0,  # moto's short poll sees every message; AWS's may not
            "seal": SEAL,
            **options,
        }


def make_queues(endpoint: str, max_receive_count: int = 5) -> SqsQueues:
    sqs = client(endpoint)
    name = f"t{uuid.uuid4().hex[:10]}"
    url, dlq_url = create_queue_with_dlq(sqs, name, max_receive_count=max_receive_count)
    fifo_url, fifo_dlq_url = create_queue_with_dlq(
        sqs, f"{name}-fifo", fifo=True, max_receive_count=max_receive_count
    )
    return SqsQueues(
        endpoint=endpoint, url=url, dlq_url=dlq_url, fifo_url=fifo_url, fifo_dlq_url=fifo_dlq_url
    )
