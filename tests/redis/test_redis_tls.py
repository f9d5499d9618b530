"""TLS end to end: a ``rediss://`` URL against a real redis-server serving TLS with a certificate
made for the test.  On asyncio the transport takes the TLS connections redis-py set up over
(``_wire``); on trio the stream transport (``_streams``) opens them with anyio."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from redis_helpers import config, start_server

from blamequeue import Job, JobContext, Queue
from blamequeue.errors import QueueError
from blamequeue_testing.servers import free_port

pytestmark = pytest.mark.anyio


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(TLS port, CA file) of a redis-server that also listens in plain text on another port
    (which only its start-up check uses)."""
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    port = free_port()
    options = {
        "--tls-port": str(port),
        "--tls-cert-file": str(cert),
        "--tls-key-file": str(key),
        "--tls-ca-cert-file": str(cert),
        "--tls-auth-clients": "no",
    }
    server = start_server([part for pair in options.items() for part in pair])
    try:
        yield port, cert
    finally:
        server.cleanup()


async def test_jobs_go_through_a_tls_connection(tls_server: tuple[int, Path]) -> None:
    port, ca = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    big = "x" * 300_000  # replies of several TLS records
    seen: list[Any] = []

    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job.payload)

    async with Queue(backends={"r": config(url)}) as queue:
        await queue.enqueue("tls", {"n": 0})
        await queue.enqueue_many("tls", [{"n": n, "big": big} for n in (1, 2)])
        result = await queue.tick("tls", record, max=10)
    assert result.succeeded == 3
    seen.sort(key=lambda payload: payload["n"])
    assert [payload["n"] for payload in seen] == [0, 1, 2]
    assert seen[1]["big"] == seen[2]["big"] == big


async def test_a_certificate_the_client_does_not_trust_is_refused(
    tls_server: tuple[int, Path],
) -> None:
    port, _ = tls_server
    queue = Queue(backends={"r": config(f"rediss://127.0.0.1:{port}/0", retry={"attempts": 1})})
    with pytest.raises(QueueError) as caught:
        async with queue:
            await queue.enqueue("tls", {"n": 0})
    assert caught.value.code == "queue/backend-unavailable"
    assert "certificate" in caught.value.message.lower()
