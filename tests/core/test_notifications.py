"""Failed-job notifications against real servers on loopback: an HTTP server (webhook with its
signature checked, Slack and Discord payloads) and an SMTP server (aiosmtpd).  Batching and
the hourly limit run on the virtual clock.  Webhooks follow no redirect, and
``verify_signature`` answers ``False`` for anything malformed (a hypothesis test)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from hypothesis import given
from hypothesis import strategies as st

from blamequeue import (
    DeadJob,
    DeadJobNotifier,
    DiscordChannel,
    EmailChannel,
    Job,
    JobContext,
    LogChannel,
    Queue,
    QueueError,
    SlackChannel,
    WebhookChannel,
    verify_signature,
)
from blamequeue._notifications import SIGNATURE_HEADER, sign
from blamequeue_testing import VirtualClock
from blamequeue_testing._conformance.fixtures import wait_until

pytestmark = pytest.mark.anyio

SECRET = "s3cret-s3cret-s3cret"


class Received:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        self.location: str | None = None


@pytest.fixture
def http_server() -> Iterator[tuple[str, Received]]:
    yield from _http_server()


@pytest.fixture
def second_http_server() -> Iterator[tuple[str, Received]]:
    yield from _http_server()


def _http_server() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.requests.append((self.path, dict(self.headers), body))
            self.send_response(received.status)
            if received.location is not None:
                self.send_header("Location", received.location)
            self.end_headers()

        do_GET = do_POST  # a followed 303 would arrive as a GET

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


async def _fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError(f"cannot charge order {job.payload}")


def _queue(clock: VirtualClock | None = None) -> Queue:
    return Queue(backends={"m": {"protocol": "memory"}}, clock=clock, sweep_interval=0)


async def test_webhook_is_signed_and_batched(http_server: tuple[str, Received]) -> None:
    url, received = http_server
    clock = VirtualClock()
    async with _queue(clock) as queue:
        notifier = queue.notify_dead_jobs(
            DeadJobNotifier(WebhookChannel(f"{url}/hooks/dead", SECRET), batch_window=30)
        )
        await queue.enqueue_many("payments", [1, 2], max_attempts=1)
        assert (await queue.tick("payments", _fail)).moved_to_dlq == 2
        await queue.enqueue("payments", 3, max_attempts=1)
        await queue.tick("payments", _fail)
        assert received.requests == []  # still gathering
        clock.advance(30)
        await wait_until(lambda: notifier.sent == 1, "the webhook")
    path, headers, body = received.requests[0]
    assert path == "/hooks/dead"
    assert headers["Content-Type"] == "application/json"
    assert verify_signature(SECRET, headers[SIGNATURE_HEADER], body, now=time.time())
    assert not verify_signature(
        "another-secret-value", headers[SIGNATURE_HEADER], body, now=time.time()
    )
    assert not verify_signature(SECRET, headers[SIGNATURE_HEADER], body + b" ", now=time.time())
    assert not verify_signature(SECRET, headers[SIGNATURE_HEADER], body, now=time.time() + 3600)
    document = json.loads(body)
    assert document["event"] == "jobs.dead"
    assert [job["reason"] for job in document["jobs"]] == ["attempts-exhausted"] * 3
    assert "cannot charge order" in document["jobs"][0]["error"]
    assert all("payload" not in job for job in document["jobs"])
    assert len(received.requests) == 1


async def test_slack_and_discord_payloads(http_server: tuple[str, Received]) -> None:
    url, received = http_server
    async with _queue() as queue:
        queue.notify_dead_jobs(
            DeadJobNotifier(
                [SlackChannel(f"{url}/slack"), DiscordChannel(f"{url}/discord")], batch_window=0
            )
        )
        await queue.enqueue("emails", 7, max_attempts=1)
        await queue.tick("emails", _fail)
        await wait_until(lambda: len(received.requests) == 2, "both webhooks")
    by_path = {path: json.loads(body) for path, _, body in received.requests}
    slack, discord = by_path["/slack"], by_path["/discord"]
    assert slack["text"].startswith("1 job(s) reached the dead-letter queue of emails")
    assert [block["type"] for block in slack["blocks"]] == ["header", "section"]
    assert "cannot charge order 7" in slack["blocks"][1]["text"]["text"]
    assert discord["username"] == "blamequeue"
    assert "cannot charge order 7" in discord["content"]


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, _Inbox]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


async def test_email_over_smtp(smtp_server: tuple[int, _Inbox]) -> None:
    port, inbox = smtp_server
    channel = EmailChannel(
        host="127.0.0.1", port=port, sender="queue@example.com", recipients=["ops@example.com"]
    )
    async with _queue() as queue:
        queue.notify_dead_jobs(DeadJobNotifier(channel, batch_window=0))
        await queue.enqueue("reports", 1, max_attempts=1)
        await queue.tick("reports", _fail)
        await wait_until(lambda: len(inbox.messages) == 1, "the email")
    [message] = inbox.messages
    assert message["Subject"] == "[blamequeue] 1 dead job(s) on reports"
    assert message["To"] == "ops@example.com"
    assert "cannot charge order 1" in message.get_payload()


async def test_rate_limit_folds_the_excess_into_the_next_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    sent: list[tuple[list[str], int]] = []

    class Recorder:
        async def send(self, jobs: list[DeadJob], *, dropped: int = 0) -> None:
            sent.append(([job.job_id for job in jobs], dropped))

    async with _queue(clock) as queue:
        notifier = queue.notify_dead_jobs(DeadJobNotifier(Recorder(), rate_limit=1, batch_window=0))
        for n in range(3):
            await queue.enqueue("q", n, max_attempts=1)
            await queue.tick("q", _fail)
            await wait_until(lambda: not notifier._pending, "the notifier")
            clock.advance(60)
        assert len(sent) == 1
        assert notifier.dropped == 2
        clock.advance(3600)
        await queue.enqueue("q", 9, max_attempts=1)
        await queue.tick("q", _fail)
        await wait_until(lambda: len(sent) == 2, "the next allowed message")
    assert sent[1][1] == 2  # it says how many were held back
    assert "over its 1 per hour" in caplog.text


async def test_filter_and_log_channel(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="blamequeue.notifications")
    async with _queue() as queue:
        queue.notify_dead_jobs(
            DeadJobNotifier(
                LogChannel(), batch_window=0, filter=lambda job: job.queue == "payments"
            )
        )
        await queue.enqueue("emails", 1, max_attempts=1)
        await queue.tick("emails", _fail)
        await queue.enqueue("payments", 2, max_attempts=1)
        await queue.tick("payments", _fail)
        await wait_until(lambda: "dead-letter queue of payments" in caplog.text, "the log")
    assert "dead-letter queue of emails" not in caplog.text


async def test_a_failing_channel_never_breaks_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens here once the probe closes
    async with _queue() as queue:
        notifier = queue.notify_dead_jobs(
            DeadJobNotifier(
                WebhookChannel(f"http://127.0.0.1:{closed}/", SECRET, timeout=2), batch_window=0
            )
        )
        await queue.enqueue("q", 1, max_attempts=1)
        assert (await queue.tick("q", _fail)).moved_to_dlq == 1
        await wait_until(lambda: notifier.failed == 1, "the failed delivery")
        await queue.enqueue("q", 2)
        assert (await queue.tick("q", lambda job, ctx: None)).succeeded == 1
    assert "notification channel" in caplog.text


async def test_a_dead_worker_s_last_attempt_is_notified(tmp_path: Path) -> None:
    clock = VirtualClock()
    sent: list[DeadJob] = []

    class Recorder:
        async def send(self, jobs: list[DeadJob], *, dropped: int = 0) -> None:
            sent.extend(jobs)

    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    async with Queue(backends={"l": config}, clock=clock, sweep_interval=0) as queue:
        queue.notify_dead_jobs(DeadJobNotifier(Recorder(), batch_window=0))
        await queue.enqueue("q", 1, max_attempts=1)
        runtime = queue._runtime(None)
        await runtime.backend.lease("q", limit=1, now=clock.now(), lease_seconds=30)
        clock.advance(31)  # the worker holding it died
        await queue.sweep()
        await wait_until(lambda: len(sent) == 1, "the notification")
    assert sent[0].reason == "lease-expired"


@pytest.fixture
def dripping_server() -> Iterator[str]:
    """An HTTP server that answers a byte at a time, never finishing its headers: each read
    gets data well within a socket timeout, so only a deadline on the whole exchange ends it."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.05):
                connection.sendall(b"X-Slow: y\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        stop.set()
        listener.close()
        thread.join(5)


async def test_a_delivery_ends_at_its_timeout_even_when_the_server_keeps_dripping(
    dripping_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with _queue() as queue:
        notifier = queue.notify_dead_jobs(
            DeadJobNotifier(WebhookChannel(dripping_server, SECRET, timeout=0.3), batch_window=0)
        )
        await queue.enqueue("q", 1, max_attempts=1)
        await queue.tick("q", _fail)
        await wait_until(lambda: notifier.failed == 1, "the failed delivery")
    assert notifier.sent == 0
    assert "within the channel's timeout" in caplog.text


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_failed_delivery_and_never_followed(
    http_server: tuple[str, Received],
    second_http_server: tuple[str, Received],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    url, hook = http_server
    elsewhere, target = second_http_server
    hook.status, hook.location = status, f"{elsewhere}/stolen"
    async with _queue() as queue:
        notifier = queue.notify_dead_jobs(
            DeadJobNotifier(WebhookChannel(f"{url}/hook", SECRET, timeout=5), batch_window=0)
        )
        await queue.enqueue("q", 1, max_attempts=1)
        await queue.tick("q", _fail)
        await wait_until(lambda: notifier.failed == 1, "the failed delivery")
    assert len(hook.requests) == 1
    assert target.requests == []  # the redirect's target received nothing
    assert notifier.sent == 0
    assert f"HTTP {status}" in caplog.text
    assert "redirects are not followed" in caplog.text


def test_secrets_stay_out_of_reprs_errors_and_logs() -> None:
    hook = WebhookChannel("https://user:pa55word@hooks.example.com/t0ken-path", SECRET)
    slack = SlackChannel("https://hooks.slack.com/services/T000/B000/XXXXSECRET")
    shown = repr(hook) + repr(slack)
    for secret in ("pa55word", "t0ken-path", SECRET, "XXXXSECRET"):
        assert secret not in shown
    assert "hooks.example.com" in shown
    with pytest.raises(QueueError) as caught:
        WebhookChannel("ftp://user:pa55word@example.com/t0ken-path", SECRET)
    assert "pa55word" not in str(caught.value)
    assert "t0ken-path" not in str(caught.value)


async def test_bad_configuration_is_refused() -> None:
    bad = [
        lambda: WebhookChannel("ftp://example.com", SECRET),
        lambda: WebhookChannel("file:///etc/passwd", SECRET),
        lambda: WebhookChannel("javascript:alert(1)", SECRET),
        lambda: WebhookChannel("http://", SECRET),
        lambda: WebhookChannel("http://example.com:port/", SECRET),
        lambda: WebhookChannel("http://example.com/a b", SECRET),
        lambda: WebhookChannel(b"http://example.com", SECRET),  # type: ignore[arg-type]
        lambda: WebhookChannel("http://example.com", SECRET, timeout=0),
        lambda: DiscordChannel("gopher://example.com/"),
        lambda: WebhookChannel("http://example.com", "short"),
        lambda: SlackChannel("not a url"),
        lambda: EmailChannel(host="", sender="a@b", recipients=["c@d"]),
        lambda: EmailChannel(host="h", sender="a@b", recipients=[]),
        lambda: EmailChannel(host="h", sender="a@b", recipients=["c@d"], username="u"),
        lambda: DeadJobNotifier([]),
        lambda: DeadJobNotifier(LogChannel(), rate_limit=0),
        lambda: DeadJobNotifier(LogChannel(), batch_window=-1),
        lambda: DeadJobNotifier(LogChannel(), filter="queue == x"),  # type: ignore[arg-type]
    ]
    for make in bad:
        with pytest.raises(QueueError) as caught:
            make()
        assert caught.value.code in ("queue/invalid-config", "queue/bad-argument")
    async with _queue() as queue:
        with pytest.raises(QueueError) as caught:
            queue.notify_dead_jobs(LogChannel())  # type: ignore[arg-type]
        assert caught.value.code == "queue/bad-argument"


def _signed(body: bytes = b'{"event":"jobs.dead"}', at: int = 1_700_000_000) -> str:
    return sign(SECRET, at, body)


def test_verify_signature_accepts_exactly_what_was_signed() -> None:
    body, header = b'{"event":"jobs.dead"}', _signed()
    assert verify_signature(SECRET, header, body, now=1_700_000_010)
    assert verify_signature(SECRET, header.encode(), body, now=1_700_000_010)  # raw header


@pytest.mark.parametrize(
    ("header", "body"),
    [
        (None, b"{}"),
        ("", b"{}"),
        ("t=1700000000", b"{}"),  # no v1
        ("v1=" + "0" * 64, b"{}"),  # no t
        (_signed()[:-1], b'{"event":"jobs.dead"}'),  # one hex digit short
        (_signed() + "0", b'{"event":"jobs.dead"}'),  # one too many
        (_signed().replace("t=", "T="), b'{"event":"jobs.dead"}'),
        (_signed().upper(), b'{"event":"jobs.dead"}'),
        (_signed()[:-1] + "é", b'{"event":"jobs.dead"}'),  # non-ASCII: compare_digest raised
        ("t=\u0661\u0667" + "\u0660" * 8 + ",v1=" + "0" * 64, b"{}"),  # int() takes these
        ("t=" + "9" * 400 + ",v1=" + "0" * 64, b"{}"),  # would overflow a float
        ("t= 1700000000,v1=" + "0" * 64, b"{}"),
        (_signed(), '{"event":"jobs.dead"}'),  # str body, not bytes
        (_signed(), None),
        (_signed().encode("utf-16"), b'{"event":"jobs.dead"}'),
        (12345, b"{}"),
    ],
)
def test_verify_signature_answers_false_for_anything_malformed(header: Any, body: Any) -> None:
    assert verify_signature(SECRET, header, body, now=1_700_000_000) is False


def test_verify_signature_answers_false_for_a_bad_secret_or_clock() -> None:
    header, body = _signed(), b'{"event":"jobs.dead"}'
    for secret in (None, "", b"s3cret-s3cret-s3cret", "\ud800" * 20):
        assert verify_signature(secret, header, body, now=1_700_000_000) is False  # type: ignore[arg-type]
    for now in (float("nan"), float("inf"), None, "1700000000"):
        assert verify_signature(SECRET, header, body, now=now) is False  # type: ignore[arg-type]
    assert (
        verify_signature(SECRET, header, body, now=1_700_000_000, tolerance=float("nan")) is False
    )


@given(
    header=st.one_of(st.none(), st.text(), st.binary(), st.integers()),
    body=st.one_of(st.none(), st.text(), st.binary()),
    now=st.one_of(st.floats(), st.integers(min_value=-(10**30), max_value=10**30)),
)
def test_verify_signature_never_raises(header: Any, body: Any, now: Any) -> None:
    assert verify_signature(SECRET, header, body, now=now) is False


@given(body=st.binary(), at=st.integers(min_value=0, max_value=10**12 - 1))
def test_verify_signature_holds_for_any_body(body: bytes, at: int) -> None:
    header = sign(SECRET, at, body)
    assert verify_signature(SECRET, header, body, now=at)
    assert not verify_signature(SECRET, header, body + b"x", now=at)
    flipped = header[:-1] + ("0" if header[-1] != "0" else "1")  # one hex digit changed
    assert not verify_signature(SECRET, flipped, body, now=at)
