"""With sealing on, nothing a caller or a handler supplies and no error text is stored in
plaintext, on any backend (SPEC §6 "What is sealed").

Each test drives a marker string of its own through every public path that stores data
(``enqueue``, ``enqueue_many``, ``enqueue_flow``, a task with ``with_context``, a batch with
``then`` / ``catch`` / ``finally`` callbacks and a failing job, a schedule with a payload, a
handler's result, its progress data, its errors, a dead letter), runs the jobs, and then reads
every raw store the backend keeps: the SQLite file, its ``-wal`` and ``-shm`` and every column
of every table; every Redis key of every type, and every message Redis published meanwhile;
every SQS message of the queue and of its dead-letter queue with all of its attributes; the
memory backend's in-process structures; and the audit JSON-lines file.  No marker may appear,
as is or base64-encoded.  The same run with ``seal=False`` must show every marker the
backend keeps at rest, so the search is known to find what it looks for.

What a backend cannot do is skipped path by path, each with its reason (:data:`CANNOT`,
checked against the backend's capabilities), and what it does not keep at all is not looked
for in the seal-off run (:data:`NOT_KEPT`).
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import boto3
import botocore.config
import pytest
import redis
from redis_helpers import SEAL as REDIS_SEAL
from redis_helpers import start_server

from blamequeue import FlowChild, Job, JobContext, JsonlAuditSink, Queue
from blamequeue.abc import Capabilities
from blamequeue_testing.servers import RedisServer, create_queue_with_dlq
from sqs.moto_server import REGION, SqsQueues, client, make_queues, sqs_endpoint  # noqa: F401

pytestmark = pytest.mark.anyio

PATHS = (
    "enqueue",
    "enqueue-many",
    "flow",
    "task-payload",
    "context",
    "batch-job",
    "batch-then",
    "batch-catch",
    "batch-finally",
    "batch-error",
    "schedule",
    "result",
    "progress",
    "error-retry",
    "error-dead",
    "dead-payload",
)
MARKS = {path: f"MARK-{path}-7f3a" for path in PATHS}
"""One marker per path: a leak names the path it came through."""

RAW, TASKS = "raw", "tasks"
"""The queue of the jobs enqueued directly, and the queue of the registered tasks."""

AUDIT_KEYS = {"a1": base64.b64encode(b"a" * 32).decode()}

_NO_RECORDS = "sqs keeps no shared records (queue/records-unsupported)"
CANNOT: dict[str, dict[str, str]] = {
    "sqs": {
        "flow": "sqs has no flows (queue/flow-unsupported)",
        **{path: _NO_RECORDS for path in PATHS if path.startswith("batch-")},
        "schedule": _NO_RECORDS,
        "result": "sqs keeps no results (queue/results-unsupported)",
        "error-retry": "sqs keeps no last_error before the last attempt (a retry only changes "
        "the message's visibility), and the retried message stays hidden for its backoff",
    },
}
"""The paths a backend cannot take, with the reason: nothing is driven through them."""

NOT_KEPT: dict[str, dict[str, str]] = {
    "sqs": {"progress": "sqs carries no progress events (no progress_events)"},
}
"""Paths a backend takes but whose data it never stores, even with ``seal=False``: the
seal-off run does not look for their markers."""


def cannot(caps: Capabilities) -> set[str]:
    """The paths the capabilities ``caps`` rule out (:data:`CANNOT` must name them)."""
    out: set[str] = set()
    if not caps.flows:
        out.add("flow")
    if not caps.records:
        out |= {path for path in PATHS if path.startswith("batch-") or path == "schedule"}
    if not caps.results:
        out.add("result")
    if caps.store_clock:  # the store keeps the lease: a retry cannot rewrite the job
        out.add("error-retry")
    return out


@pytest.mark.parametrize(
    ("protocol", "path"),
    [(protocol, path) for protocol, paths in CANNOT.items() for path in paths],
)
def test_a_path_a_backend_cannot_take_is_skipped(protocol: str, path: str) -> None:
    pytest.skip(f"{protocol}, {path}: {CANNOT[protocol][path]}")


# -- searching ------------------------------------------------------------------------------
def _base64_forms(text: str) -> list[bytes]:
    """What ``text`` looks like inside any longer base64 (standard or URL-safe): its encoding
    at each of the three byte alignments, less the characters its neighbours change."""
    forms = []
    for pad, skip in ((0, 0), (1, 2), (2, 3)):
        encoded = base64.b64encode(b"\0" * pad + text.encode())[skip:-4]
        forms += [encoded, encoded.translate(bytes.maketrans(b"+/", b"-_"))]
    return forms


_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")


def _decoded_runs(blob: bytes) -> Iterator[bytes]:
    """Every run of base64 characters in ``blob``, decoded (both alphabets)."""
    for run in _BASE64_RUN.findall(blob):
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                yield decode(run + b"=" * (-len(run) % 4))
            except (binascii.Error, ValueError):
                pass


def where_found(dump: list[tuple[str, bytes]], marker: str) -> list[str]:
    """The parts of ``dump`` that hold ``marker``, as is or base64-encoded."""
    plain, forms = marker.encode(), _base64_forms(marker)
    found = []
    for where, blob in dump:
        if plain in blob:
            found.append(where)
        elif any(form in blob for form in forms):
            found.append(f"{where} (base64)")
        elif any(plain in decoded for decoded in _decoded_runs(blob)):
            found.append(f"{where} (inside base64)")
    return found


def test_the_search_finds_a_marker_as_is_and_in_base64_at_any_offset() -> None:
    marker = MARKS["enqueue"]
    for prefix in (b"", b"x", b"xy"):
        blob = base64.b64encode(prefix + marker.encode() + b"tail")
        assert where_found([("b64", blob)], marker) == ["b64 (base64)"]
        urlsafe = base64.urlsafe_b64encode(prefix + marker.encode() + b"?>")
        assert where_found([("url", urlsafe)], marker)
    assert where_found([("raw", b'{"m":"' + marker.encode() + b'"}')], marker) == ["raw"]
    assert where_found([("other", b"MARK-enqueue-0000")], marker) == []


# -- driving every path ----------------------------------------------------------------------
def register_tasks(queue: Queue) -> None:
    @queue.task(name="Contextual", queue=TASKS)
    async def contextual(payload: Any, ctx: Any) -> None:
        assert ctx.job.context["secret"] == MARKS["context"]

    @queue.task(name="Member", queue=TASKS, tries=1)
    async def member(payload: Any, ctx: Any) -> None:
        if payload.get("fail"):
            raise RuntimeError(MARKS["batch-error"])

    @queue.task(name="Callback", queue=TASKS)
    async def callback(payload: Any, ctx: Any) -> None:
        pass

    @queue.task(name="Scheduled", queue=TASKS)
    async def scheduled(payload: Any, ctx: Any) -> None:
        pass


async def raw_handler(job: Job, ctx: JobContext) -> Any:
    kind = job.payload["kind"]
    if kind == "report":
        await ctx.progress(50, data={"m": MARKS["progress"]})
        return {"m": MARKS["result"]}
    if kind == "retry":
        raise RuntimeError(MARKS["error-retry"])
    if kind == "dead":
        raise RuntimeError(MARKS["error-dead"])
    return None


async def drive(queue: Queue, skipped: Mapping[str, str], stack: AsyncExitStack) -> None:
    """Send every marker not in ``skipped`` through its path, then run every job.  A
    subscription to the job reporting progress stays open on ``stack`` (where a backend keeps
    the events of a subscribed job, they are at rest too)."""
    register_tasks(queue)

    def wanted(path: str) -> bool:
        return path not in skipped

    report = await queue.enqueue(RAW, {"kind": "report", "m": MARKS["enqueue"]})
    if queue._runtimes["b"].backend.capabilities.progress_events:
        await stack.enter_async_context(queue.subscribe(report))
    await queue.enqueue_many(RAW, [{"kind": "plain", "m": MARKS["enqueue-many"]}] * 2)
    if wanted("flow"):
        await queue.enqueue_flow(
            RAW,
            [
                FlowChild(name="first", payload={"kind": "plain", "m": MARKS["flow"]}),
                FlowChild(name="then", payload={"kind": "plain"}, depends_on=("first",)),
            ],
        )
    if wanted("error-retry"):
        await queue.enqueue(RAW, {"kind": "retry"}, max_attempts=2)
    await queue.enqueue(RAW, {"kind": "dead", "m": MARKS["dead-payload"]}, max_attempts=1)
    await (
        queue.job("Contextual", {"m": MARKS["task-payload"]})
        .with_context(secret=MARKS["context"])
        .dispatch()
    )
    if wanted("batch-job"):
        await (
            queue.batch([("Member", {"m": MARKS["batch-job"]}), ("Member", {"fail": True})])
            .name("nightly-import")
            .allow_failures()
            .then("Callback", {"m": MARKS["batch-then"]})
            .catch("Callback", {"m": MARKS["batch-catch"]})
            .finally_("Callback", {"m": MARKS["batch-finally"]})
            .dispatch()
        )
    if wanted("schedule"):
        queue.schedule("@hourly", "Scheduled", {"m": MARKS["schedule"]}, name="hourly-report")
        await queue.trigger_schedule("hourly-report")
    for _ in range(6):  # the flow's second child and the callbacks come due as others end
        ran = await queue.tick(RAW, raw_handler, max=50)
        ran_tasks = await queue.tick(TASKS, queue.tasks, max=50)
        if not ran.leased and not ran_tasks.leased:
            break


# -- reading the raw stores -----------------------------------------------------------------
Dump = list[tuple[str, bytes]]


def _text(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return repr(value).encode("utf-8", "backslashreplace")


def sqlite_dump(path: Path) -> Dump:
    dump: Dump = []
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            dump.append((file.name, file.read_bytes()))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            rows = db.execute(f'SELECT * FROM "{table}"').fetchall()
            dump.append((f"table {table}", b"\n".join(_text(cell) for r in rows for cell in r)))
    db.close()
    return dump


def redis_dump(client: redis.Redis) -> Dump:
    dump: Dump = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            values: Iterable[Any] = [client.get(key)]
        elif kind == "hash":
            values = [item for pair in client.hgetall(key).items() for item in pair]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "set":
            values = client.smembers(key)
        elif kind == "zset":
            values = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            values = [
                item for _, fields in client.xrange(key) for pair in fields.items() for item in pair
            ]
        else:
            values = [f"<{kind}>".encode()]
        dump.append((f"redis {kind} {key!r}", b"\n".join([key, *map(_text, values)])))
    return dump


class Published:
    """Every message published on the Redis server while it listens (``PSUBSCRIBE *``)."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)
        self._pubsub = self._client.pubsub()
        self._pubsub.psubscribe("*")
        # Listening once the server confirms the subscription, not when the command is sent.
        while (confirmed := self._pubsub.get_message(timeout=10)) is None:
            pass
        assert confirmed["type"] == "psubscribe"
        self.messages: list[tuple[bytes, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _take(self, timeout: float) -> bool:
        message = self._pubsub.get_message(timeout=timeout)
        if message is None:
            return False
        if message["type"] == "pmessage":
            self.messages.append((message["channel"], message["data"]))
        return True

    def _listen(self) -> None:
        while not self._stop.is_set():
            self._take(0.05)

    def dump(self) -> Dump:
        """What was published (the queue is closed: the rest is in the socket already)."""
        self._stop.set()
        self._thread.join()
        while self._take(0.1):
            pass
        self._pubsub.close()
        self._client.close()
        return [(f"redis message on {channel!r}", data) for channel, data in self.messages]


def sqs_dump(endpoint: str, urls: Iterable[str]) -> Dump:
    sqs = client(endpoint)
    dump: Dump = []
    for url in urls:
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        hidden = int(counts["ApproximateNumberOfMessagesNotVisible"]) + int(
            counts["ApproximateNumberOfMessagesDelayed"]
        )
        assert hidden == 0, f"{url}: {hidden} messages hidden from the search"
        while True:  # each message once: received messages stay hidden until the end
            got = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=60,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            for message in got:
                parts = [message["Body"].encode()]
                for name, attribute in message.get("MessageAttributes", {}).items():
                    value = attribute.get("StringValue") or attribute.get("BinaryValue") or b""
                    parts += [
                        name.encode(),
                        _text(value) if isinstance(value, bytes) else value.encode(),
                    ]
                dump.append((f"sqs message {message['MessageId']} on {url}", b"\n".join(parts)))
    return dump


class SentToSqs:
    """A boto3 client for the backend (its ``client`` option) that keeps the body of every
    request it sends: all the backend ever wrote to SQS, including the messages of jobs that
    completed (and were deleted) before the queues are read."""

    def __init__(self, endpoint: str) -> None:
        self.client = boto3.client(
            "sqs",
            endpoint_url=endpoint,
            region_name=REGION,
            config=botocore.config.Config(retries={"total_max_attempts": 1}),
        )
        self.bodies: list[tuple[str, bytes]] = []
        self.client.meta.events.register("before-send.sqs", self._keep)

    def _keep(self, request: Any, event_name: str, **kwargs: Any) -> None:
        body = request.body
        self.bodies.append((event_name, body if isinstance(body, bytes) else str(body).encode()))

    def dump(self) -> Dump:
        return [(f"request {name}", body) for name, body in self.bodies]


def memory_dump(backend: Any) -> Dump:
    """Every string and bytes value reachable from the memory backend's store."""
    found: list[bytes] = []
    seen: set[int] = set()
    stack: list[Any] = [backend._store]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item.encode("utf-8", "backslashreplace"))
            continue
        if isinstance(item, bytes):
            found.append(item)
            continue
        if id(item) in seen or item is None or isinstance(item, int | float | bool):
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset | collections.deque):
            stack += list(item)
        elif type(item).__module__.startswith(("blamequeue", "blamequeue_testing")):
            slots = [name for cls in type(item).__mro__ for name in getattr(cls, "__slots__", ())]
            stack += [getattr(item, name, None) for name in slots]
            stack += list(getattr(item, "__dict__", {}).values())
    return [("memory store", b"\n".join(found))]


# -- the checks ----------------------------------------------------------------------------
def check(
    dump: Dump, *, sealed: bool, protocol: str, skipped: Mapping[str, str], audit: Path
) -> None:
    dump = [*dump, ("audit file", audit.read_bytes())]
    # The events that could carry data were written: progress (its data), a dead letter (its
    # error).
    names = {json.loads(line)["name"] for line in audit.read_bytes().splitlines()}
    assert {"system.queue.progress", "system.queue.dlq.write"} <= names
    driven = [path for path in PATHS if path not in skipped]
    if sealed:
        leaks = {path: where_found(dump, MARKS[path]) for path in driven}
        assert {path: where for path, where in leaks.items() if where} == {}
        return
    not_kept = NOT_KEPT.get(protocol, {})
    missing = [
        path for path in driven if path not in not_kept and not where_found(dump, MARKS[path])
    ]
    assert missing == [], "seal=False stores these in plaintext: the search must find them"
    # The audit trail never holds data, sealed or not.
    assert [path for path in PATHS if MARKS[path].encode() in audit.read_bytes()] == []


def audit_sink(tmp_path: Path) -> tuple[JsonlAuditSink, Path]:
    path = tmp_path / "audit.jsonl"
    return JsonlAuditSink(path, keys=AUDIT_KEYS), path


async def run_queue(
    config: dict[str, Any], tmp_path: Path, snapshot: Callable[[Queue], Dump]
) -> tuple[Dump, Mapping[str, str], Path]:
    """Drive every path on a queue of one backend; ``snapshot`` reads the raw stores while the
    queue is still open."""
    sink, audit = audit_sink(tmp_path)
    async with Queue(backends={"b": config}, sweep_interval=0, audit_sinks=[sink]) as queue:
        skipped = CANNOT.get(config["protocol"], {})
        assert cannot(queue._runtimes["b"].backend.capabilities) == set(skipped)
        async with AsyncExitStack() as stack:
            await drive(queue, skipped, stack)
            dump = snapshot(queue)
    return dump, skipped, audit


SEALED = pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "seal-off"])


@SEALED
async def test_memory_stores_no_marker_in_plaintext(tmp_path: Path, sealed: bool) -> None:
    config: dict[str, Any] = {"protocol": "memory", **({} if sealed else {"seal": False})}
    dump, skipped, audit = await run_queue(
        config, tmp_path, lambda queue: memory_dump(queue._runtimes["b"].backend)
    )
    check(dump, sealed=sealed, protocol="memory", skipped=skipped, audit=audit)


@SEALED
async def test_local_stores_no_marker_in_plaintext(tmp_path: Path, sealed: bool) -> None:
    path = tmp_path / "jobs.db"
    config: dict[str, Any] = {"protocol": "local", "path": str(path)}
    if not sealed:
        config["seal"] = False
    dump, skipped, audit = await run_queue(config, tmp_path, lambda queue: sqlite_dump(path))
    dump += sqlite_dump(path)  # and the file as closing left it (checkpointed)
    check(dump, sealed=sealed, protocol="local", skipped=skipped, audit=audit)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.cleanup()


@SEALED
async def test_redis_stores_and_publishes_no_marker_in_plaintext(
    tmp_path: Path, sealed: bool, redis_server: RedisServer
) -> None:
    url = redis_server.url
    raw = redis.Redis.from_url(url)
    raw.flushall()
    config: dict[str, Any] = {"protocol": "redis", "url": url, "seal": REDIS_SEAL}
    if not sealed:
        config["seal"] = False
    published = Published(url)
    try:
        dump, skipped, audit = await run_queue(config, tmp_path, lambda queue: redis_dump(raw))
    finally:
        dump_published = published.dump()
    raw.close()
    check(dump + dump_published, sealed=sealed, protocol="redis", skipped=skipped, audit=audit)


@SEALED
async def test_sqs_messages_hold_no_marker_in_plaintext(
    tmp_path: Path,
    sealed: bool,
    sqs_endpoint: str,  # noqa: F811
) -> None:
    queues: SqsQueues = make_queues(sqs_endpoint)
    # The tasks get an SQS queue of their own (with its own dead-letter queue).
    tasks_url, tasks_dlq_url = create_queue_with_dlq(
        client(sqs_endpoint), queues.url.rsplit("/", 1)[1] + "-tasks"
    )
    sent = SentToSqs(sqs_endpoint)
    config = queues.config(queue_urls={TASKS: tasks_url}, client=sent.client)
    del config["region"], config["endpoint_url"]  # the client says them
    if not sealed:
        config["seal"] = False
    dump, skipped, audit = await run_queue(config, tmp_path, lambda queue: [])
    urls = [queues.url, queues.dlq_url, tasks_url, tasks_dlq_url]
    dump += await anyio.to_thread.run_sync(sqs_dump, sqs_endpoint, urls)
    dump += sent.dump()
    check(dump, sealed=sealed, protocol="sqs", skipped=skipped, audit=audit)
