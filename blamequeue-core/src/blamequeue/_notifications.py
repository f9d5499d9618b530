"""Failed-job notifications: tell people when jobs land in the dead-letter queue (SPEC §9).

A :class:`DeadJobNotifier` listens to this process's ``job.dead`` events (a job ran out of
attempts, or its lease expired on its last attempt), keeps those its ``filter`` accepts, and
hands them to its channels off the hot path:
dead jobs arriving within ``batch_window`` seconds go out as one message, and each channel
sends at most ``rate_limit`` messages per hour (what is over the limit is counted and folded
into the next message allowed).  Delivery runs in the queue's task group; a channel that fails
is logged and counted, never retried into a storm, and never disturbs a worker.  Shutdown
flushes what is pending, within the queue's close timeout.

Messages carry the job id, queue, attempts and error text, never the payload (payloads are
sealed at rest for a reason).  Channels: :class:`WebhookChannel` (JSON, signed with
HMAC-SHA256), :class:`SlackChannel`, :class:`DiscordChannel`, :class:`EmailChannel` (SMTP) and
:class:`LogChannel`; each is also usable alone (``await channel.send(batch)``).

HTTP deliveries go to ``http``/``https`` URLs only (checked when the channel is built), within
the channel's timeout, and follow no redirect: a 3xx answer is a failed delivery, so a hook
that redirects cannot send the signed body (or the request) anywhere else.  A URL's password
never appears in a ``repr``, an error or a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
import smtplib
import ssl
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import attrs

from ._events import QueueEvent
from ._job_logging import jobs_extra
from ._redaction import redacted
from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import BadArgumentError, ConfigError

if TYPE_CHECKING:
    from .abc import Clock

__all__ = [
    "SIGNATURE_HEADER",
    "DeadJob",
    "DeadJobNotifier",
    "DiscordChannel",
    "EmailChannel",
    "LogChannel",
    "NotificationChannel",
    "SlackChannel",
    "WebhookChannel",
    "verify_signature",
]

log = logging.getLogger("blamequeue.notifications")

SIGNATURE_HEADER: Final = "X-Blamequeue-Signature"
"""``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the secret>``."""

MAX_PENDING: Final = 1000
_ERROR_CHARS = 1000


@attrs.frozen(kw_only=True)
class DeadJob:
    """One job that reached the dead-letter queue, as a notification tells of it."""

    job_id: str
    queue: str
    backend: str | None
    at: datetime
    attempts: int | None
    error: str | None
    reason: str
    """``attempts-exhausted`` or ``lease-expired`` (its worker died or hung on the last try)."""


class NotificationChannel(Protocol):
    """Where notifications go: an object with ``async def send(jobs, *, dropped)``."""

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None: ...


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


def _config(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


def _shown_url(url: Any) -> str:
    """What a ``repr`` or an error shows of a hook URL: its scheme and host.  The rest stays
    out, since for Slack and Discord the path *is* the credential."""
    if not isinstance(url, str):
        return f"a {type(url).__name__}"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "an unparsable URL"
    return f"{parts.scheme or '(no scheme)'}://{host or '(no host)'}/..."


def _check_url(url: Any, what: str) -> str:
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        host = parts.hostname if parts is not None else None
        if parts is not None:
            _ = parts.port  # a port that is not a number raises ValueError here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise _config(
            f"{what} must be an http:// or https:// URL with a host, got {_shown_url(url)}"
        )
    if any(c.isspace() or not c.isprintable() for c in url):
        raise _config(f"{what} must not hold spaces or control characters ({_shown_url(url)})")
    return str(url)


def _webhook_url(url: Any) -> str:
    return _check_url(url, "the webhook url")


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise _bad(f"timeout must be seconds (a number), got {timeout!r}")
    if not is_duration(timeout, positive=True):
        raise _bad(f"timeout must be positive seconds, at most {MAX_SECONDS_TEXT}, got {timeout!r}")
    return float(timeout)


def summary(jobs: Sequence[DeadJob], dropped: int) -> str:
    """A plain-text account of ``jobs`` (used by every text channel)."""
    queues = sorted({job.queue for job in jobs})
    head = f"{len(jobs)} job(s) reached the dead-letter queue of {', '.join(queues) or '-'}"
    lines = [head]
    for job in jobs[:20]:
        error = (job.error or "").strip().splitlines()
        lines.append(
            f"- {job.job_id} on {job.queue} after {job.attempts} attempt(s), {job.reason}: "
            f"{error[0][:200] if error else '(no error text)'}"
        )
    if len(jobs) > 20:
        lines.append(f"... and {len(jobs) - 20} more")
    if dropped:
        lines.append(f"({dropped} more were not sent: over the hourly limit)")
    return "\n".join(lines)


def _document(jobs: Sequence[DeadJob], dropped: int) -> dict[str, Any]:
    return {
        "event": "jobs.dead",
        "dropped": dropped,
        "jobs": [
            {
                "job_id": job.job_id,
                "queue": job.queue,
                "backend": job.backend,
                "at": job.at.isoformat(),
                "attempts": job.attempts,
                "error": job.error,
                "reason": job.reason,
            }
            for job in jobs
        ],
    }


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: ``None`` makes urllib raise the 3xx as an ``HTTPError``, a failed
    delivery.  A hook that moved must be reconfigured, never followed, since the signed body
    would go wherever the redirect points (another host, another scheme)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# One opener for every HTTP channel: redirects refused, everything else urllib's defaults.
_OPENER = urllib.request.build_opener(_NoRedirects)


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers=dict(headers))
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's connection open (a 3xx or an error status)
        raise


async def _deliver(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> None:
    """POST ``body`` to ``url``, done or failed within ``timeout`` seconds in all.

    urllib in a worker thread (no HTTP client dependency; it runs under asyncio and trio; see
    docs/design.md).  Its own timeout bounds each socket operation, not the whole exchange, so
    a server that answers one byte at a time could hold a delivery for ever: the deadline
    around it ends the wait (a ``TimeoutError``, a failed delivery), and the abandoned thread
    ends at its next socket timeout.
    """
    with anyio.fail_after(timeout):
        await anyio.to_thread.run_sync(_post, url, body, headers, timeout, abandon_on_cancel=True)


async def _post_json(url: str, document: Any, timeout: float) -> None:
    body = json.dumps(document, separators=(",", ":")).encode()
    await _deliver(
        url, body, {"Content-Type": "application/json", "User-Agent": "blamequeue"}, timeout
    )


def _mac(secret: str, timestamp: int, body: bytes) -> bytes:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return mac.hexdigest().encode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={_mac(secret, timestamp, body).decode()}"


# Exactly what sign() writes: ASCII digits (at most 12: a timestamp, not a number to overflow
# a float), then 64 lowercase hex digits.  Anything else is malformed, not "probably fine".
_SIGNATURE = re.compile(rb"t=([0-9]{1,12}),v1=([0-9a-f]{64})")


def verify_signature(
    secret: str, header: str, body: bytes, *, now: float, tolerance: float = 300.0
) -> bool:
    """Check a webhook's :data:`SIGNATURE_HEADER` on the receiving side: the HMAC matches the
    exact body and the timestamp is within ``tolerance`` seconds of ``now`` (replays of an
    old delivery fail).

    Answers ``False``, never raises, for anything malformed: a header that is not the text
    :func:`sign` writes (``None``, non-ASCII, a missing ``t=`` or ``v1=``, a wrong length), a
    body that is not bytes, a secret that is not a non-empty string, a ``now`` or
    ``tolerance`` that is not a finite number.  ``header`` may be ``str`` or ASCII ``bytes``
    (as some frameworks hand raw headers over)."""
    raw: Any = header
    if isinstance(raw, str):
        if not raw.isascii():
            return False
        raw = raw.encode("ascii")
    if not isinstance(raw, bytes | bytearray) or not isinstance(body, bytes | bytearray):
        return False
    if not isinstance(secret, str) or not secret:
        return False
    numbers = (now, tolerance)
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
        return False
    if not all(math.isfinite(x) for x in numbers):
        return False
    found = _SIGNATURE.fullmatch(bytes(raw))
    if found is None:
        return False
    timestamp = int(found.group(1))
    if abs(now - timestamp) > tolerance:
        return False
    try:
        expected = _mac(secret, timestamp, bytes(body))
    except UnicodeEncodeError:  # a secret with lone surrogates cannot have signed anything
        return False
    return hmac.compare_digest(expected, found.group(2))


@attrs.define
class WebhookChannel:
    """POST the dead jobs as JSON to ``url``, signed: the :data:`SIGNATURE_HEADER` header
    holds a timestamp and the HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret``
    (verify with :func:`verify_signature`)."""

    url: str = attrs.field(converter=_webhook_url, repr=_shown_url)
    secret: str = attrs.field(repr=False)
    timeout: float = attrs.field(default=10.0, converter=_check_timeout)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.secret, str) or len(self.secret) < 16:
            raise _config(
                "the webhook secret must be a string of at least 16 characters (receivers "
                "check the signature with it); e.g. secrets.token_urlsafe(32)"
            )

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None:
        body = json.dumps(_document(jobs, dropped), separators=(",", ":")).encode()
        now = int(time.time())  # real time: the receiver checks it against its own clock
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "blamequeue",
            SIGNATURE_HEADER: sign(self.secret, now, body),
        }
        await _deliver(self.url, body, headers, self.timeout)


@attrs.define
class SlackChannel:
    """Post to a Slack incoming webhook (``https://hooks.slack.com/services/...``)."""

    webhook_url: str = attrs.field(converter=_webhook_url, repr=_shown_url)
    timeout: float = attrs.field(default=10.0, converter=_check_timeout)

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None:
        text = summary(jobs, dropped)
        title = text.splitlines()[0]
        document = {
            "text": title,
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
                {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}},
            ],
        }
        await _post_json(self.webhook_url, document, self.timeout)


@attrs.define
class DiscordChannel:
    """Post to a Discord webhook (``https://discord.com/api/webhooks/...``)."""

    webhook_url: str = attrs.field(converter=_webhook_url, repr=_shown_url)
    username: str = "blamequeue"
    timeout: float = attrs.field(default=10.0, converter=_check_timeout)

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None:
        document = {"username": self.username, "content": summary(jobs, dropped)[:2000]}
        await _post_json(self.webhook_url, document, self.timeout)


@attrs.define
class EmailChannel:
    """Send an email over SMTP (``starttls`` upgrades the connection; ``username`` /
    ``password`` log in)."""

    host: str
    sender: str
    recipients: Sequence[str] = attrs.field(converter=tuple)
    port: int = 25
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    starttls: bool = False
    timeout: float = attrs.field(default=10.0, converter=_check_timeout)

    def __attrs_post_init__(self) -> None:
        if not self.host or not isinstance(self.host, str):
            raise _config(f"the SMTP host must be a host name, got {self.host!r}")
        if not self.recipients or not all(isinstance(r, str) and "@" in r for r in self.recipients):
            raise _config(f"recipients must be email addresses, got {list(self.recipients)!r}")
        if not isinstance(self.sender, str) or "@" not in self.sender:
            raise _config(f"the sender must be an email address, got {self.sender!r}")
        if (self.username is None) != (self.password is None):
            raise _config("give both username and password for SMTP login, or neither")

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None:
        message = EmailMessage()
        queues = ", ".join(sorted({job.queue for job in jobs}))
        message["Subject"] = f"[blamequeue] {len(jobs)} dead job(s) on {queues}"
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message.set_content(summary(jobs, dropped) + "\n")
        await anyio.to_thread.run_sync(self._deliver, message, abandon_on_cancel=True)

    def _deliver(self, message: EmailMessage) -> None:
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if self.username is not None and self.password is not None:
                smtp.login(self.username, self.password)
            smtp.send_message(message)


@attrs.define
class LogChannel:
    """Log the dead jobs (logger ``blamequeue.notifications`` by default, at ERROR)."""

    logger: str = "blamequeue.notifications"
    level: int = logging.ERROR

    async def send(self, jobs: Sequence[DeadJob], *, dropped: int = 0) -> None:
        logging.getLogger(self.logger).log(self.level, "%s", summary(jobs, dropped))


def _check_channels(channels: Any) -> tuple[NotificationChannel, ...]:
    items = tuple(channels) if isinstance(channels, list | tuple) else (channels,)
    if not items:
        raise _config("a DeadJobNotifier needs at least one channel")
    for channel in items:
        if not callable(getattr(channel, "send", None)):
            raise _config(f"{channel!r} is not a channel: it has no async send(jobs) method")
    return items


def _positive(value: Any, what: str, *, integer: bool = False) -> Any:
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    else:
        ok = is_duration(value)
    if not ok:
        kind = "an int >= 1" if integer else f"seconds >= 0, at most {MAX_SECONDS_TEXT}"
        raise _bad(f"{what} must be {kind}, got {value!r}")
    return value


class EventSource(Protocol):
    """What a notifier needs of the queue it is attached to (a :class:`Queue`): its events
    and its clock."""

    @property
    def clock(self) -> Clock: ...
    def on(self, event: str, listener: Callable[[QueueEvent], object]) -> object: ...


class DeadJobNotifier:
    """Notify ``channels`` of jobs reaching the dead-letter queue.

    ``rate_limit``: messages per channel per hour; ``batch_window``: seconds to gather dead
    jobs into one message (0: one message per dead job); ``filter``: a predicate over
    :class:`DeadJob` (e.g. ``lambda job: job.queue == "payments"``).  Attach it with
    :meth:`Queue.notify_dead_jobs`.
    """

    def __init__(
        self,
        channels: NotificationChannel | Sequence[NotificationChannel],
        *,
        rate_limit: int = 30,
        batch_window: float = 30.0,
        filter: Callable[[DeadJob], bool] | None = None,
    ) -> None:
        self.channels = _check_channels(channels)
        self.rate_limit = _positive(rate_limit, "rate_limit", integer=True)
        self.batch_window = float(_positive(batch_window, "batch_window"))
        if filter is not None and not callable(filter):
            raise _bad(f"filter must be a function of a DeadJob, got {filter!r}")
        self.filter = filter
        self.sent = 0
        """Messages delivered (all channels)."""
        self.failed = 0
        """Deliveries a channel raised on."""
        self.dropped = 0
        """Dead jobs not delivered: over the rate limit or the pending bound."""
        self._pending: deque[DeadJob] = deque()
        self._arrived: anyio.Event | None = None  # made by run(): an Event needs a running loop
        self._sent_at: dict[int, deque[float]] = {i: deque() for i in range(len(self.channels))}
        self._owed: dict[int, int] = dict.fromkeys(range(len(self.channels)), 0)
        self._queue: EventSource | None = None

    # -- wiring --------------------------------------------------------------------------
    def attach(self, queue: EventSource) -> None:
        self._queue = queue
        queue.on("job.dead", self._on_event)

    def _on_event(self, event: QueueEvent) -> None:
        stalled = bool(event.data.get("stalled"))
        job = DeadJob(
            job_id=event.job_id or "",
            queue=event.queue or "",
            backend=event.backend,
            at=event.at,
            attempts=event.data.get("attempts"),
            error=(event.data.get("error") or "lease expired: its worker stopped answering")[
                :_ERROR_CHARS
            ],
            reason="lease-expired" if stalled else "attempts-exhausted",
        )
        if self.filter is not None:
            try:
                if not self.filter(job):
                    return
            except Exception:
                log.exception("notification filter %r failed; the job is notified", self.filter)
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append(job)
        if self._arrived is not None:
            self._arrived.set()

    # -- delivery ------------------------------------------------------------------------
    def _clock(self) -> Clock:
        assert self._queue is not None
        return self._queue.clock

    async def run(self) -> None:
        """Deliver until cancelled (started in the queue's task group)."""
        while True:
            if not self._pending:
                arrived = self._arrived = anyio.Event()
                await arrived.wait()
            if self.batch_window > 0:
                await self._clock().sleep(self.batch_window)
            await self.flush()

    async def flush(self) -> None:
        """Send what is pending now (one message per channel)."""
        if not self._pending:
            return
        batch = list(self._pending)
        self._pending.clear()
        backends = {job.backend for job in batch}
        extra = jobs_extra(
            next(iter(backends)) if len(backends) == 1 else None,
            [job.job_id for job in batch],
            [job.queue for job in batch],
        )
        now = self._clock().now()
        for index, channel in enumerate(self.channels):
            recent = self._sent_at[index]
            while recent and recent[0] <= now - 3600:
                recent.popleft()
            if len(recent) >= self.rate_limit:
                self._owed[index] += len(batch)
                self.dropped += len(batch)
                log.warning(
                    "notification of %d dead job(s) not sent to %r: over its %d per hour",
                    len(batch),
                    channel,
                    self.rate_limit,
                    extra=extra,
                )
                continue
            recent.append(now)
            owed, self._owed[index] = self._owed[index], 0
            try:
                await channel.send(batch, dropped=owed)
                self.sent += 1
            except Exception as exc:
                self.failed += 1
                log.warning(
                    "notification channel %r failed: %s", channel, _describe(exc), extra=extra
                )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        if 300 <= exc.code < 400:
            return f"HTTP {exc.code} {exc.reason}: redirects are not followed (set the new URL)"
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, TimeoutError):
        return "no complete answer within the channel's timeout (raise timeout= if it is slow)"
    return redacted(f"{type(exc).__name__}: {exc}")
