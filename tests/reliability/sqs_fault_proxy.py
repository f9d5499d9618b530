"""A fault-injecting HTTP proxy in front of moto's SQS server, for the SQS fault scenarios.

Not a test module.  :class:`FaultProxy` listens on a free loopback port and forwards every
request to moto unchanged, unless a rule the test set (:meth:`FaultProxy.inject`) matches the
request's SQS action: then it answers with what AWS answers under load or in an outage, or cuts
the connection, or forwards the request and cuts the connection instead of answering (the
request took effect, the client never hears of it).  Rules match by action name
(``SendMessageBatch``, ``ReceiveMessage``...), for a number of requests, a time window, or until
removed.  Every request is counted per action and outcome, so a test can say how many requests
a failing call really made.

The answers follow SQS's JSON protocol (what botocore speaks to SQS): status, a ``__type``
naming the error, and the ``x-amzn-query-error`` header SQS adds so that clients see the error
codes of its older query protocol.  botocore parses them exactly as it parses AWS's.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

__all__ = [
    "DROP",
    "FAULTS",
    "INTERNAL_FAILURE",
    "LOSE_ANSWER",
    "REQUEST_THROTTLED",
    "SERVICE_UNAVAILABLE",
    "THROTTLING",
    "Fault",
    "FaultProxy",
    "Rule",
]

_TARGET_PREFIX: Final = "AmazonSQS."
_JSON: Final = "application/x-amz-json-1.0"
# Headers of moto's answer that describe the connection or the body as moto sent it.
_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
)


@attrs.frozen
class Fault:
    """What the proxy does instead of (or after) forwarding a request.

    ``kind``: ``"answer"`` (an error answer, moto never sees the request), ``"drop"`` (the
    connection is closed without an answer, moto never sees the request) or ``"lose-answer"``
    (moto handles the request, then the connection is closed without the answer).
    """

    name: str
    kind: str = "answer"
    status: int = 0
    error_type: str = ""
    query_code: str = ""
    fault_side: str = ""
    message: str = ""

    def body(self) -> bytes:
        return json.dumps({"__type": self.error_type, "message": self.message}).encode()


THROTTLING: Final = Fault(
    "ThrottlingException",
    status=400,
    error_type="com.amazon.coral.availability#ThrottlingException",
    query_code="ThrottlingException",
    fault_side="Sender",
    message="Rate exceeded",
)
REQUEST_THROTTLED: Final = Fault(
    "RequestThrottled",
    status=400,
    error_type="com.amazonaws.sqs#RequestThrottled",
    query_code="RequestThrottled",
    fault_side="Sender",
    message="The request was denied due to request throttling.",
)
INTERNAL_FAILURE: Final = Fault(
    "InternalFailure",
    status=500,
    error_type="com.amazon.coral.service#InternalFailure",
    query_code="InternalFailure",
    fault_side="Receiver",
    message="The request processing has failed because of an unknown error, exception or failure.",
)
SERVICE_UNAVAILABLE: Final = Fault(
    "ServiceUnavailable",
    status=503,
    error_type="com.amazon.coral.availability#ServiceUnavailableException",
    query_code="ServiceUnavailable",
    fault_side="Receiver",
    message="The request has failed due to a temporary failure of the server.",
)
DROP: Final = Fault("dropped-connection", kind="drop")
LOSE_ANSWER: Final = Fault("answer-lost", kind="lose-answer")
#: Every fault, for tests that go through them all.
FAULTS: Final = (THROTTLING, REQUEST_THROTTLED, INTERNAL_FAILURE, SERVICE_UNAVAILABLE, DROP)


@attrs.define(eq=False)
class Rule:
    """Answer requests of ``actions`` (every action when ``None``) with ``fault``: every
    ``every``-th of them (each when ``None``) after the first ``skip``; ``times`` in all (no
    limit when ``None``), until ``until`` (``time.monotonic()``; no limit when ``None``), or
    until :meth:`FaultProxy.remove`."""

    fault: Fault
    actions: frozenset[str] | None
    times: int | None
    until: float | None
    every: int | None = None
    skip: int = 0
    seen: int = 0
    hits: int = 0

    def spent(self, now: float) -> bool:
        return (self.times is not None and self.hits >= self.times) or (
            self.until is not None and now >= self.until
        )

    def takes(self, action: str) -> bool:
        """Whether this request of ``action`` gets the fault (counts it if so)."""
        if self.actions is not None and action not in self.actions:
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        if self.every is not None and self.seen % self.every:
            return False
        self.hits += 1
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    server: _Server
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:
        return None  # the counts are the log

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        target = self.headers.get("X-Amz-Target", "")
        action = target.removeprefix(_TARGET_PREFIX) if target else "?"
        proxy = self.server.proxy
        fault = proxy.fault_for(action)
        if fault is not None and fault.kind == "drop":
            self._cut()
            return
        if fault is not None and fault.kind == "answer":
            self._answer_with(fault)
            return
        try:
            status, reason, headers, answer = self._forward(body)
        except OSError:
            proxy.count(action, "upstream-failed")
            self._cut()
            return
        if fault is not None:  # lose-answer: moto did the work, the client never hears of it
            self._cut()
            return
        proxy.count(action, "forwarded")
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        if self._upstream is None:
            host, port = self.server.proxy.upstream
            self._upstream = http.client.HTTPConnection(host, port, timeout=60)
        headers = {
            name: value
            for name, value in self.headers.items()
            if name.lower() not in ("connection", "keep-alive", "content-length")
        }
        try:
            self._upstream.request("POST", self.path, body=body, headers=headers)
            response = self._upstream.getresponse()
            answer = response.read()
        except OSError:
            self._upstream.close()
            self._upstream = None
            raise
        return response.status, response.reason, response.getheaders(), answer

    def _answer_with(self, fault: Fault) -> None:
        payload = fault.body()
        self.send_response_only(fault.status)
        self.send_header("Content-Type", _JSON)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("x-amzn-query-error", f"{fault.query_code};{fault.fault_side}")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _cut(self) -> None:
        """Close the connection without a word: the client reads end-of-file."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._upstream.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # a client that went away mid-request is no news here


class FaultProxy:
    """An HTTP proxy on ``127.0.0.1`` in front of the SQS endpoint ``upstream``, injecting
    faults by rule.  A context manager; :attr:`endpoint` is its URL.

    ::

        with FaultProxy(moto_endpoint) as proxy:
            proxy.inject(THROTTLING, actions={"SendMessageBatch"}, times=2)
            ...                          # the next two sends are throttled
            proxy.requests("SendMessageBatch")   # how many reached the proxy
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None, upstream
        assert parts.port is not None, upstream
        self.upstream: tuple[str, int] = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.endpoint = ""

    def __enter__(self) -> FaultProxy:
        server = _Server(self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- the script --------------------------------------------------------------------------
    def inject(
        self,
        fault: Fault,
        *,
        actions: Iterable[str] | None = None,
        times: int | None = None,
        seconds: float | None = None,
        every: int | None = None,
        skip: int = 0,
    ) -> Rule:
        """Answer the matching requests with ``fault`` from now on (every ``every``-th of them,
        or each) after letting ``skip`` through: ``times`` requests, for ``seconds``, or until
        :meth:`remove`.  Rules are tried in the order they were set; the first that takes a
        request answers it."""
        rule = Rule(
            fault=fault,
            actions=None if actions is None else frozenset(actions),
            times=times,
            until=None if seconds is None else time.monotonic() + seconds,
            every=every,
            skip=skip,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    @contextmanager
    def outage(self, fault: Fault, *, actions: Iterable[str] | None = None) -> Iterator[Rule]:
        """Every matching request gets ``fault`` while the block runs."""
        rule = self.inject(fault, actions=actions)
        try:
            yield rule
        finally:
            self.remove(rule)

    def fault_for(self, action: str) -> Fault | None:
        """The fault to inject into this request of ``action`` (counted), if any."""
        now = time.monotonic()
        with self._lock:
            self._rules = [rule for rule in self._rules if not rule.spent(now)]
            for rule in self._rules:
                if rule.takes(action):
                    self._counts[(action, rule.fault.name)] += 1
                    return rule.fault
        return None

    # -- the counts --------------------------------------------------------------------------
    def count(self, action: str, outcome: str) -> None:
        with self._lock:
            self._counts[(action, outcome)] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        """``{(action, outcome): requests}``; outcome ``"forwarded"`` or a fault's name."""
        with self._lock:
            return dict(self._counts)

    def requests(self, action: str | None = None, outcome: str | None = None) -> int:
        with self._lock:
            return sum(
                n
                for (a, o), n in self._counts.items()
                if (action is None or a == action) and (outcome is None or o == outcome)
            )

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by fault name."""
        totals: Counter[str] = Counter()
        with self._lock:
            for (_action, outcome), n in self._counts.items():
                if outcome not in ("forwarded", "upstream-failed"):
                    totals[outcome] += n
        return dict(totals)

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()
