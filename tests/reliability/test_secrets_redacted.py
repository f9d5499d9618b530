"""Secrets stay secret (SPEC §14): a Redis password given in the URL, as the ``password`` option or
as ``BLAMEQUEUE_REDIS_PASSWORD`` never appears in an error, a log record, a ``repr``, the health
report or its HTTP body, the CLI's output or the dashboard's API.

A real ``redis-server`` with ``requirepass`` is used, and a distinctive password is searched
for in everything a person or a log shipper could read: the happy path, a wrong password, a
port nothing listens on, and a server that goes away while the queue runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import boto3
import botocore.config
import httpx
import pytest
import redis
from redis_helpers import SEAL, start_server

from asgi_server import serving
from blamequeue import Job, JobContext, Queue, QueueError, dashboard_app, health_app
from blamequeue_redis._options import redact_url
from blamequeue_testing.servers import RedisServer, free_port

# The CLI's helpers live beside its tests; pytest puts that folder on sys.path only when it
# collects tests/cli.
sys.path.append(str(Path(__file__).parents[1] / "cli"))
from cli_helpers import DEADLINE, command, environment

pytestmark = pytest.mark.anyio

PASSWORD = "pw-Zq8-MARKER"
MARKER = "MARKER"
"""Part of every password used here (the wrong one too): found anywhere, a secret leaked."""
TOKEN = "dashboard-token-0123456789"
SEAL_LINE = "t1:" + SEAL["keys"]["t1"]
CLI_HOWS = ("url", "option", "env")
"""How the password is given: in the URL, as the ``password`` option, as the variable."""
HOWS = (*CLI_HOWS, "query")
"""... or as the URL's ``password`` query parameter (redis-py passes it on)."""


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    server = start_server(["--requirepass", PASSWORD])
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def clean_server(locked_server: RedisServer) -> RedisServer:
    """The module's server, emptied for this test."""
    with redis.Redis(port=locked_server.port, password=PASSWORD) as admin:
        admin.flushall()
    return locked_server


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record of every logger, DEBUG and up."""
    caplog.set_level(logging.DEBUG)
    return caplog


def queue_for(how: str, port: int, password: str = PASSWORD) -> Queue:
    """A queue on 127.0.0.1:``port`` given ``password`` the way ``how`` says."""
    host = f"127.0.0.1:{port}"
    if how == "url":
        url = f"redis://default:{quote(password, safe='')}@{host}/0"
        return Queue(backends={"r": {"protocol": "redis", "url": url, "seal": SEAL}})
    if how == "query":
        url = f"redis://{host}/0?password={quote(password, safe='')}"
        return Queue(backends={"r": {"protocol": "redis", "url": url, "seal": SEAL}})
    if how == "option":
        config = {"protocol": "redis", "url": f"redis://{host}/0", "password": password}
        return Queue(backends={"r": {**config, "seal": SEAL}})
    return Queue.from_env(
        {
            "BLAMEQUEUE_PROTOCOL": "redis",
            "BLAMEQUEUE_REDIS_URL": f"redis://{host}/0",
            "BLAMEQUEUE_REDIS_PASSWORD": password,
            "BLAMEQUEUE_SEAL_KEYS": SEAL_LINE,
        }
    )


def error_texts(error: BaseException) -> list[str]:
    """What a person or a log could read of ``error``: its text, repr, and the whole formatted
    traceback with the exceptions it was raised from."""
    texts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    if isinstance(error, QueueError):
        texts.append(error.message)
    return texts


def object_texts(queue: Queue) -> list[str]:
    """The reprs of the queue and of what it holds for its backend."""
    texts = [repr(queue)]
    for runtime in queue._runtimes.values():
        backend: Any = runtime.backend
        texts += [repr(runtime), repr(backend), str(backend), repr(vars(backend).get("_config"))]
    return texts


def log_texts(logs: pytest.LogCaptureFixture) -> list[str]:
    return [logs.text, *(record.getMessage() for record in logs.records)]


def assert_hidden(texts: list[str]) -> None:
    leaked = [text for text in texts if MARKER in text]
    assert not leaked, f"the password leaked into: {leaked[0]!r}"


async def noop(job: Job, ctx: JobContext) -> None:
    pass


async def fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError("the handler failed")


async def call_asgi(app: Any) -> tuple[int, bytes]:
    """One ``GET /`` through an ASGI app, in process."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def dashboard_bodies(queue: Queue, anyio_backend: str, queue_name: str) -> list[str]:
    """Every JSON API answer of a dashboard over ``queue``, read with the token."""
    app = dashboard_app(queue, token=TOKEN, allow_payloads=True)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    paths = [
        "/api/overview",
        f"/api/queues/{queue_name}/jobs",
        f"/api/queues/{queue_name}/jobs?state=dead",
        f"/api/queues/{queue_name}/dlq",
        "/api/batches",
        "/api/schedules",
        "/api/jobs/job-none",
        "/api/jobs/job-none/logs",
        "/api/flows/flow-none",
    ]
    bodies: list[str] = []
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        for path in paths:
            answer = await client.get(path, headers=headers)
            bodies.append(f"{path} {answer.status_code} {answer.text}")
    return bodies


# -- what messages show of a Redis URL -------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://worker:s3cret@host:6379/0", "redis://worker:***@host:6379/0"),
        ("redis://:s3cret@host/0", "redis://:***@host/0"),
        ("rediss://token-s3cret@host:6380", "rediss://***@host:6380"),
        ("redis://u:p%40ss@word@host/0", "redis://u:***@host/0"),
        ("redis://host/0?password=s3cret&db=1", "redis://host/0?password=***&db=1"),
        ("unix://:s3cret@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
    ],
)
def test_a_redis_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# -- starting fails --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        f"http://:{PASSWORD}@127.0.0.1:6379/0",  # not a Redis scheme
        f"redis://:{PASSWORD}@127.0.0.1:port/0",  # a port that is not a number
        f"redis://[::1:{PASSWORD}@127.0.0.1:6379/0",  # not a URL at all
        f"ftp://127.0.0.1/0?password={PASSWORD}",
    ],
)
def test_a_bad_url_is_refused_without_showing_its_password(
    url: str, logs: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(QueueError) as info:
        Queue(backends={"r": {"protocol": "redis", "url": url, "seal": SEAL}})
    assert info.value.code == "queue/invalid-config"
    assert "option 'url'" in info.value.message
    assert_hidden(error_texts(info.value) + log_texts(logs))


@pytest.mark.parametrize("how", HOWS)
async def test_a_wrong_password_is_refused_without_showing_it(
    how: str, locked_server: RedisServer, logs: pytest.LogCaptureFixture
) -> None:
    queue = queue_for(how, locked_server.port, password=f"{PASSWORD}-wrong")
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.code == "queue/invalid-config"
    assert "refused the credentials" in info.value.message
    assert_hidden(error_texts(info.value) + object_texts(queue) + log_texts(logs))


@pytest.mark.parametrize("how", HOWS)
async def test_an_unreachable_server_is_reported_without_the_password(
    how: str, logs: pytest.LogCaptureFixture
) -> None:
    queue = queue_for(how, free_port())
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.code == "queue/backend-unavailable"
    assert "127.0.0.1" in info.value.message  # still says where it tried
    assert_hidden(error_texts(info.value) + object_texts(queue) + log_texts(logs))


# -- running ---------------------------------------------------------------------------------
@pytest.mark.parametrize("how", HOWS)
async def test_a_running_queue_never_shows_the_password(
    how: str, locked_server: RedisServer, logs: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    name = f"secrets-{how}"
    queue = queue_for(how, locked_server.port)
    async with queue:
        await queue.enqueue(name, {"n": 1}, max_attempts=1)
        assert (await queue.tick(name, fail)).moved_to_dlq == 1
        await queue.enqueue(name, {"n": 2})
        report = await queue.health()
        status, body = await call_asgi(health_app(queue))
        texts = [
            repr(queue.list_backends()),
            json.dumps(report.to_dict()),
            repr(report),
            body.decode(),
            *object_texts(queue),
            *await dashboard_bodies(queue, anyio_backend, name),
        ]
        assert status in (200, 207, 503)
        await queue.tick(name, noop)
    assert_hidden(texts + object_texts(queue) + log_texts(logs))


@pytest.fixture
async def vanishing_server() -> AsyncIterator[RedisServer]:
    """A server of this test alone, which the test stops while a queue uses it."""
    server = start_server(["--requirepass", PASSWORD])
    try:
        yield server
    finally:
        server.cleanup()


@pytest.mark.parametrize("how", HOWS)
async def test_a_server_that_goes_away_is_reported_without_the_password(
    how: str,
    vanishing_server: RedisServer,
    logs: pytest.LogCaptureFixture,
    anyio_backend: str,
) -> None:
    queue = queue_for(how, vanishing_server.port)
    texts: list[str] = []
    async with queue:
        await queue.enqueue("q", {"n": 1})
        await anyio.to_thread.run_sync(vanishing_server.stop)
        with pytest.raises(QueueError) as info:
            await queue.enqueue("q", {"n": 2})
        texts += error_texts(info.value)
        report = await queue.health()
        assert report.status == "unhealthy"
        status, body = await call_asgi(health_app(queue))
        assert status == 503
        texts += [json.dumps(report.to_dict()), body.decode(), *object_texts(queue)]
        texts += await dashboard_bodies(queue, anyio_backend, "q")
    assert "127.0.0.1" in info.value.message
    assert_hidden(texts + log_texts(logs))


# -- the CLI ---------------------------------------------------------------------------------
def run_cli(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        command(*args),
        env={**environment(), **env},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def cli_settings(
    how: str, port: int, password: str, tmp_path: Path
) -> tuple[list[str], dict[str, str]]:
    """Options and variables that give the CLI ``password`` the way ``how`` says (``option``:
    a ``--config`` file)."""
    host = f"127.0.0.1:{port}"
    seal = {"BLAMEQUEUE_SEAL_KEYS": SEAL_LINE}
    if how == "url":
        url = f"redis://default:{quote(password, safe='')}@{host}/0"
        return [], {**seal, "BLAMEQUEUE_PROTOCOL": "redis", "BLAMEQUEUE_REDIS_URL": url}
    if how == "env":
        return [], {
            **seal,
            "BLAMEQUEUE_PROTOCOL": "redis",
            "BLAMEQUEUE_REDIS_URL": f"redis://{host}/0",
            "BLAMEQUEUE_REDIS_PASSWORD": password,
        }
    config = tmp_path / "queues.toml"
    config.write_text(
        f'[backends.r]\nprotocol = "redis"\nurl = "redis://{host}/0"\npassword = "{password}"\n'
    )
    return ["--config", str(config)], seal


@pytest.mark.parametrize("how", CLI_HOWS)
def test_the_cli_never_prints_the_password(
    how: str, clean_server: RedisServer, tmp_path: Path
) -> None:
    locked_server = clean_server
    outputs: list[str] = []
    cases: list[tuple[int, str, Callable[[str], bool]]] = [
        (locked_server.port, PASSWORD, lambda out: out.startswith("exit 0")),
        (locked_server.port, f"{PASSWORD}-wrong", lambda out: "queue/invalid-config" in out),
        (free_port(), PASSWORD, lambda out: "queue/backend-unavailable" in out),
    ]
    for number, (port, password, expected) in enumerate(cases):
        options, env = cli_settings(how, port, password, tmp_path)
        commands = [["backends", "--json"], ["health"]]
        if number == 0:  # the failures are the same error whichever way it is printed
            commands += [["backends"], ["health", "--json"]]
        for args in commands:
            output = run_cli(*args, *options, env=env)
            assert expected(output), output
            outputs.append(output)
    assert_hidden(outputs)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://default:{PASSWORD}@127.0.0.1:6379/0",
        f"redis://127.0.0.1:6379/0?password={PASSWORD}",
    ],
)
def test_the_worker_banner_names_the_host_without_the_password(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blamequeue._cli._worker import _where

    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "redis")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_URL", url)
    banner = _where(argparse.Namespace(config=None, backend_config=None, path=None))
    assert banner == "redis (redis://127.0.0.1:6379)"


# -- SQS -------------------------------------------------------------------------------------
def sqs_config(**options: Any) -> dict[str, Any]:
    return {
        "protocol": "sqs",
        "queue_url": "http://127.0.0.1:9/123456789012/jobs",
        "region": "us-east-1",
        "seal": SEAL,
        **options,
    }


@pytest.mark.parametrize(
    "options",
    [
        {"endpoint_url": f"http://AKIAEXAMPLE:{PASSWORD}@127.0.0.1:9"},
        {"endpoint_url": f"http://{PASSWORD}@127.0.0.1:9"},
        {"queue_url": f"https://user:{PASSWORD}@sqs.eu-west-1.amazonaws.com/123456789012/jobs"},
        {"queue_urls": {"q": f"https://:{PASSWORD}@sqs.eu-west-1.amazonaws.com/1/q"}},
        {"dlq_url": f"https://u:{PASSWORD}@sqs.eu-west-1.amazonaws.com/123456789012/dead"},
        {"queue_url": f"ftp://u:{PASSWORD}@example.com/1/q"},
    ],
)
def test_an_sqs_url_holding_credentials_is_refused_without_showing_them(
    options: dict[str, Any], logs: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(QueueError) as info:
        Queue(backends={"s": sqs_config(**options)})
    assert info.value.code == "queue/invalid-config"
    assert_hidden(error_texts(info.value) + log_texts(logs))


def test_an_sqs_endpoint_token_in_the_query_is_not_in_the_options_repr() -> None:
    queue = Queue(backends={"s": sqs_config(endpoint_url=f"http://127.0.0.1:9/?token={PASSWORD}")})
    assert "token=***" in repr(vars(queue._runtimes["s"].backend)["_config"])
    assert_hidden(object_texts(queue))


async def test_a_callers_sqs_client_with_credentials_in_its_endpoint_is_reported_without_them(
    logs: pytest.LogCaptureFixture,
) -> None:
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=f"http://AKIAEXAMPLE:{PASSWORD}@127.0.0.1:{free_port()}",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )
    config = {**sqs_config(client=client, retry={"attempts": 1}), "region": None}
    queue = Queue(backends={"s": config})
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.code == "queue/backend-unavailable"
    assert "***@127.0.0.1" in info.value.message
    ours = [r.getMessage() for r in logs.records if r.name.startswith("blamequeue")]
    assert_hidden(error_texts(info.value) + object_texts(queue) + ours)
