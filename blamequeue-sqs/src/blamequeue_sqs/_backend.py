"""The ``sqs`` backend: :class:`SqsBackend`, jobs as messages of AWS SQS queues (SPEC §5.3).

The SQS-native model: SQS keeps the lease itself (the visibility timeout), so the backend maps
each transition onto the SQS call that does it and keeps no state of its own beyond the leases
this process holds:

========================  ==============================================================
enqueue / enqueue_many    SendMessageBatch (10 per call, split by size)
lease                     ReceiveMessage (up to 10 per call; VisibilityTimeout = lease)
settle ``done``           DeleteMessageBatch (the settlements of a batch, 10 per call)
settle ``retry``          ChangeMessageVisibilityBatch to the backoff delay
settle ``dead``           ChangeMessageVisibilityBatch (fence), SendMessageBatch to the
                          dead-letter queue, DeleteMessageBatch
settle ``release``        same as ``dead`` but back to the queue, the attempt given back
                          (FIFO: ChangeMessageVisibilityBatch to 0, keeping the order)
extend (heartbeat)        ChangeMessageVisibilityBatch
wait_for_work (idle)      ReceiveMessage with WaitTimeSeconds (long polling)
copies of a job           DeleteMessageBatch, at lease (a send stored twice: its answer
                          was lost and the retry sent it again)
size                      GetQueueAttributes
purge                     GetQueueAttributes, PurgeQueue
dlq_size                  GetQueueAttributes on the dead-letter queue
dlq_list / retry / purge  ReceiveMessage over the dead-letter queue, then
                          ChangeMessageVisibilityBatch / SendMessage / DeleteMessageBatch
========================  ==============================================================

The receipt handle of a received message is the lease token; ``attempts`` is SQS's
ApproximateReceiveCount.  Errors from boto3 are mapped to
:class:`~blamequeue.errors.QueueError` in :mod:`blamequeue_sqs._sqs_errors`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import secrets
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

import anyio
import anyio.from_thread
import attrs

from blamequeue.abc import (
    Backend,
    BackendContext,
    Capabilities,
    Lease,
    NewJob,
    Settlement,
    StoredJob,
    SweepResult,
)
from blamequeue.errors import (
    BackendUnavailableError,
    BadArgumentError,
    ConfigError,
    QueueError,
    UnsupportedError,
)
from blamequeue_sqs import _messages as messages
from blamequeue_sqs._messages import (
    ATTR_ERROR,
    ATTR_JOB_ID,
    ATTR_PARK_UNTIL,
    MAX_BATCH_ENTRIES,
    Decoded,
    body_of,
    ceil_seconds,
    chunk_entries,
    decode,
    encode_body,
    entry_size,
    group_id,
    number_attribute,
    stored_job,
    string_attribute,
)
from blamequeue_sqs._options import QUEUE_PLACEHOLDER, SqsOptions, parse_options
from blamequeue_sqs._sqs_errors import is_missing_queue, is_stale, map_error
from blamequeue_sqs._transport import NO_BOTOCORE_RETRIES, SqsTransport, botocore_tries

__all__ = ["SqsBackend"]

log = logging.getLogger("blamequeue.sqs")

_OUTCOMES: Final = frozenset({"done", "retry", "dead", "release"})
_DEFAULT_MAX_MESSAGE: Final = 262_144
_SYSTEM_ATTRIBUTES: Final = ["ApproximateReceiveCount", "SentTimestamp"]
# How long a message stays hidden while the backend moves it (fence, send the copy, delete).
_MOVE_VISIBILITY: Final = 60
# How long dead letters stay hidden while a dlq_* call scans them (they are shown again after).
_SCAN_VISIBILITY: Final = 30
# A received message handed out with less than this left of its visibility could be
# received by someone else before its handler starts: it is left to come back instead.
_MIN_LEASE_LEFT: Final = 1.0
# Recently settled tokens and sent job ids: a call the core retries after a partial failure
# applies only what was not applied yet (and returns the same answers).
_MEMO_SIZE: Final = 50_000
# The idle long poll asks for this lease when no lease call told it better.
_DEFAULT_VISIBILITY: Final = 30
_MAX_WAIT_SECONDS: Final = 20
_CLIENT_LOCK: Final = threading.Lock()
_SQS_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_REGION_IN_HOST: Final = re.compile(
    r"^https?://(?:sqs[.-]([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com", re.IGNORECASE
)


@attrs.define(eq=False)
class _Route:
    """One SQS queue, as resolved (and perhaps created) on first use."""

    url: str
    fifo: bool
    max_message_size: int = _DEFAULT_MAX_MESSAGE
    dlq_url: str | None = None
    max_receive_count: int | None = None


@attrs.define(eq=False)
class _Received:
    """A message received and not yet handed out."""

    route: _Route
    message: dict[str, Any]
    received_at: float
    expires_at: float


@attrs.define(eq=False)
class _Held:
    """A lease this process handed out: what settling it needs (SQS wants the queue URL, and
    moving a message to the dead-letter queue needs its body)."""

    route: _Route
    token: str
    job: StoredJob
    decoded: Decoded
    received_at: float
    lost: bool = False


@attrs.define(eq=False)
class _Box:
    """Where a receive running in a worker thread leaves its messages.  If the awaiting task
    was cancelled, whoever finishes last puts them in the stash: a received message is never
    forgotten (it would stay hidden for a whole lease, an attempt spent)."""

    messages: list[_Received] = attrs.field(factory=list)
    done: bool = False
    orphan: bool = False


@attrs.define(eq=False)
class _Chores:
    """Messages a lease received but must not hand out."""

    foreign: list[_Received] = attrs.field(factory=list)
    parked: list[tuple[_Received, Decoded]] = attrs.field(factory=list)
    exhausted: list[tuple[_Received, Decoded]] = attrs.field(factory=list)
    copies: list[_Received] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.foreign or self.parked or self.exhausted or self.copies)


def _infer_region(url: str | None) -> str | None:
    if url is None:
        return None
    match = _REGION_IN_HOST.match(url)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _remember(memo: dict[str, Any], key: str, value: Any) -> None:
    memo[key] = value
    while len(memo) > _MEMO_SIZE:
        del memo[next(iter(memo))]


class SqsBackend(Backend):
    """Jobs as messages of AWS SQS queues (protocol ``sqs``).

    Options:

    * ``queue_url``: the SQS queue of every queue name not in ``queue_urls``.  Names sharing
      one SQS queue are one stream (a consumer of any of them receives all their jobs; size,
      purge and the dead-letter queue are the SQS queue's).  A URL holding ``{queue}``
      (``https://sqs.eu-west-1.amazonaws.com/123456789012/jobs-{queue}``) gives every queue
      name its own SQS queue instead.
    * ``queue_urls``: ``{queue_name: url}`` for names with a queue of their own.
    * ``dlq_url``: the dead-letter queue of ``queue_url``; by default every queue's is read
      from its RedrivePolicy.
    * ``region``, ``endpoint_url``: for the boto3 client (credentials come from the boto3
      chain).  The region defaults to the one in an AWS queue URL, then to boto3's own.
    * ``client``: bring your own boto3 SQS client (never closed by the backend); not
      combinable with ``region`` / ``endpoint_url``.
    * ``max_in_flight_requests``: boto3 calls running at once, each in a worker thread (16).
    * ``create_queues``: create a missing queue on first use, with a dead-letter queue
      ``<name>-dlq`` and a RedrivePolicy of ``max_receive_count`` receives (default off).
    * ``max_receive_count``: the RedrivePolicy of queues the backend creates (10).
    * ``message_group``: FIFO queues: ``"queue"`` (the default: the queue name is the
      MessageGroupId, jobs run in order) or ``"job"`` (each job its own group: no order).
    * ``dlq_scan_wait``: the WaitTimeSeconds of the receives that scan a dead-letter queue
      (1; a short poll may miss messages of a small queue on AWS).
    * ``max_payload_bytes`` (taken by the core, like every backend's): at most, and by
      default, 184,320 (180 KiB), what fits one message (see :attr:`max_payload_bytes`).

    Runs on asyncio and trio: boto3 is called from anyio worker threads.
    """

    protocol: ClassVar[str] = "sqs"
    capabilities: ClassVar[Capabilities] = Capabilities(
        dlq=True,
        flows=False,
        native_lease=True,
        priority=False,
        delay=True,
        cross_process_wakeup=True,
        requires_seal_key=True,
        async_libraries=frozenset({"asyncio", "trio"}),
    )
    # An SQS message carries at most 262,144 bytes (body and attributes).  A payload's JSON
    # of N bytes travels sealed, as "bq1:<key id, at most 64 characters>:" and the base64 of a
    # 24-byte nonce, a 16-byte MAC, the 26-character binding to its place and the N bytes:
    # 69 + 4 * ceil((66 + N) / 3) ASCII bytes in the body (_messages.body_of).  For N = 180 KiB
    # that is 245,917, leaving 16,227 bytes for the body's other fields (id, queue name of up
    # to 200 characters escaped as ASCII, times, meta with a sealed context) and attributes.
    # With seal=False the payload's quotes and non-ASCII text are escaped in the body instead
    # (up to 3x): keep payloads smaller there, or SQS refuses the send.
    max_payload_bytes: ClassVar[int | None] = 184_320

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._config: SqsOptions = parse_options(options)
        self._where = f"sqs backend {context.name!r}"
        self._transport: SqsTransport | None = None
        self._owned_client: Any = None
        self._routes: dict[str, _Route] = {}
        self._route_locks: dict[str, anyio.Lock] = {}
        # Guards the stash and the closed flag: worker threads put received messages there.
        self._lock = threading.Lock()
        self._stash: dict[str, deque[_Received]] = {}
        self._closed = False
        self._held: dict[str, _Held] = {}
        self._settled: dict[str, bool] = {}
        self._sent: dict[str, None] = {}
        # Job ids this process completed: a later message of one is a copy (a send whose
        # answer was lost, stored twice), deleted on receipt instead of run again.
        self._done: dict[str, None] = {}
        self._asked: dict[str, tuple[int, int]] = {}
        self._expired_error: str | None = None
        self._dead_at_lease: list[StoredJob] = []
        # Long polls (wait_for_work) run on after their waiter is cancelled, so a same-process
        # enqueue wakes a consumer at once: per queue URL, set once the last one returned.
        self._polls: dict[str, anyio.Event] = {}
        # Queue URLs whose last long poll waited its full time and found nothing: the lease
        # right after it need not ask SQS again (an idle consumer costs one request a wait).
        self._quiet: set[str] = set()
        self._detached = 0
        self._close_later: Any = None

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        if self._transport is not None:
            return
        config = self._config
        client = config.client
        if client is None:
            client = await anyio.to_thread.run_sync(self._make_client)
            self._owned_client = client
        else:
            tries = botocore_tries(client)
            if tries is not None and tries > 1:
                log.warning(
                    "%s: the client passed as 'client' retries each request itself (%d tries): "
                    "with the backend's 'retry' policy on top, a failing call makes %d times "
                    "its requests, waits out botocore's backoff in a worker thread, and fewer "
                    "faults reach the circuit breaker. Make the client with "
                    "botocore.config.Config(retries={'total_max_attempts': 1}) to leave "
                    "retrying to the 'retry' option",
                    self._where,
                    tries,
                    tries,
                )
        self._transport = SqsTransport(
            client, limit=config.max_in_flight_requests, where=self._where
        )
        with self._lock:
            self._closed = False
        try:
            static = list(config.queue_urls.values())
            if config.queue_url is not None and not config.templated:
                static.append(config.queue_url)
            for url in dict.fromkeys(static):
                route = await self._resolve(url, create=config.create_queues, required=True)
                assert route is not None
                self._routes[url] = route
        except BaseException:
            await self.close()
            raise

    def _make_client(self) -> Any:
        # Imported here: loading the plugin (every Queue does) should not pay for boto3.
        import boto3
        import botocore.config
        import botocore.exceptions

        config = self._config
        region = config.region or _infer_region(config.queue_url)
        if region is None:
            region = next(filter(None, map(_infer_region, config.queue_urls.values())), None)
        try:
            # boto3's default session, shared by every backend of the process (as
            # `boto3.client()` does): its credentials and service model are loaded once.
            # Making clients from it is not thread-safe, hence the lock.
            with _CLIENT_LOCK:
                return boto3.client(
                    "sqs",
                    region_name=region,
                    endpoint_url=config.endpoint_url,
                    config=botocore.config.Config(
                        max_pool_connections=config.max_in_flight_requests,
                        # One retry policy: the queue's `retry` config (it also keeps the request
                        # count honest).
                        retries=dict(NO_BOTOCORE_RETRIES),
                        connect_timeout=5,
                        read_timeout=_MAX_WAIT_SECONDS + 10,
                    ),
                )
        except botocore.exceptions.BotoCoreError as exc:
            raise map_error(exc, where=self._where, action="client") from exc

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            leftovers = [item for stash in self._stash.values() for item in stash]
            self._stash.clear()
        transport = self._transport
        if transport is not None and leftovers:
            # Received but never handed out: make them visible again now, not after a lease.
            await self._show_again(transport, leftovers)
        self._transport = None
        self._routes.clear()
        self._route_locks.clear()
        self._polls.clear()
        with self._lock:
            owned, self._owned_client = self._owned_client, None
            if owned is not None and self._detached:
                # A long poll whose waiter was cancelled still runs in a worker thread: the
                # last one to finish closes the client (after showing its messages again).
                self._close_later, owned = owned, None
        if owned is not None:
            await anyio.to_thread.run_sync(_close_client, owned)

    def _require_transport(self) -> SqsTransport:
        transport = self._transport
        if transport is None:
            raise QueueError(
                "queue/not-initialized",
                f"{self._where} is not open: use 'async with queue:' or await queue.start() "
                f"before calling it",
            )
        return transport

    # -- routes: queue name → SQS queue --------------------------------------------------
    def _url_for(self, queue: str) -> str:
        config = self._config
        url = config.queue_urls.get(queue)
        if url is not None:
            return url
        if config.queue_url is None:
            raise ConfigError(
                "queue/invalid-config",
                f"{self._where}: queue {queue!r} has no SQS queue: add it to 'queue_urls' or "
                f"set 'queue_url'",
            )
        if not config.templated:
            return config.queue_url
        url = config.queue_url.replace(QUEUE_PLACEHOLDER, queue)
        name = url.rstrip("/").rsplit("/", 1)[-1]
        base = name.removesuffix(".fifo")
        longest = 76 if config.create_queues else 80  # room for "-dlq"
        if not _SQS_NAME.fullmatch(base) or len(name) > 80 or len(base) > longest:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{self._where}: queue name {queue!r} makes the SQS queue name {name!r}, which "
                f"SQS refuses: use letters, digits, '-' and '_' (at most {longest} characters "
                f"in all), or map the name in 'queue_urls'",
            )
        return url

    async def _route(self, queue: str, *, create: bool) -> _Route | None:
        """The SQS queue of ``queue``; ``None`` when it does not exist (templated URLs only)."""
        url = self._url_for(queue)
        route = self._routes.get(url)
        if route is not None:
            return route
        lock = self._route_locks.get(url)
        if lock is None:
            lock = self._route_locks[url] = anyio.Lock()
        async with lock:
            route = self._routes.get(url)
            if route is None:
                route = await self._resolve(url, create=create, required=False)
                if route is not None:
                    self._routes[url] = route
            return route

    async def _resolve(self, url: str, *, create: bool, required: bool) -> _Route | None:
        transport = self._require_transport()
        names = ["RedrivePolicy", "MaximumMessageSize"]
        try:
            response = await transport.call(
                "GetQueueAttributes", QueueUrl=url, AttributeNames=names
            )
            actual = url
        except QueueError as exc:
            if not is_missing_queue(exc):
                raise
            if not create:
                if required:
                    raise
                return None
            actual = await self._create_queue(url)
            response = await transport.call(
                "GetQueueAttributes", QueueUrl=actual, AttributeNames=names
            )
        attributes = response.get("Attributes", {})
        route = _Route(url=actual, fifo=actual.endswith(".fifo"))
        try:
            route.max_message_size = int(attributes.get("MaximumMessageSize", _DEFAULT_MAX_MESSAGE))
        except ValueError:
            pass
        redrive = attributes.get("RedrivePolicy")
        target: str | None = None
        if redrive:
            try:
                policy = json.loads(redrive)
                target = str(policy["deadLetterTargetArn"])
                route.max_receive_count = int(policy["maxReceiveCount"])
            except (ValueError, KeyError, TypeError):
                log.warning("%s: unreadable RedrivePolicy on %s: %r", self._where, url, redrive)
        if url == self._config.queue_url and self._config.dlq_url is not None:
            route.dlq_url = self._config.dlq_url
        elif target is not None:
            route.dlq_url = await self._url_of_arn(target)
        return route

    async def _url_of_arn(self, arn: str) -> str:
        parts = arn.split(":")
        if len(parts) != 6:
            raise ConfigError(
                "queue/invalid-config",
                f"{self._where}: the RedrivePolicy names {arn!r}, which is not an SQS queue ARN",
            )
        response = await self._require_transport().call(
            "GetQueueUrl", QueueName=parts[5], QueueOwnerAWSAccountId=parts[4]
        )
        return str(response["QueueUrl"])

    async def _create_queue(self, url: str) -> str:
        """Create the queue ``url`` names, with its dead-letter queue and RedrivePolicy."""
        transport = self._require_transport()
        name = url.rstrip("/").rsplit("/", 1)[-1]
        fifo = name.endswith(".fifo")
        base = name.removesuffix(".fifo")
        dlq_name = f"{base}-dlq" + (".fifo" if fifo else "")
        fifo_attributes = {"FifoQueue": "true"} if fifo else {}
        dlq = await transport.call("CreateQueue", QueueName=dlq_name, Attributes=fifo_attributes)
        arn = await transport.call(
            "GetQueueAttributes", QueueUrl=dlq["QueueUrl"], AttributeNames=["QueueArn"]
        )
        policy = json.dumps(
            {
                "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
                "maxReceiveCount": str(self._config.max_receive_count),
            }
        )
        created = await transport.call(
            "CreateQueue",
            QueueName=name,
            Attributes={**fifo_attributes, "RedrivePolicy": policy},
        )
        log.info("%s: created SQS queue %s (dead letters: %s)", self._where, name, dlq_name)
        return str(created["QueueUrl"])

    def _require_dlq(self, route: _Route) -> str:
        if route.dlq_url is None:
            raise ConfigError(
                "queue/invalid-config",
                f"{self._where}: SQS queue {route.url} has no dead-letter queue: give it a "
                f"RedrivePolicy (`aws sqs set-queue-attributes --queue-url URL --attributes "
                f"RedrivePolicy=...`, see docs/backends/sqs.md) or set the option 'dlq_url'",
            )
        return route.dlq_url

    def _missing(self, queue: str) -> QueueError:
        return BackendUnavailableError(
            f"{self._where}: the SQS queue of {queue!r} ({self._url_for(queue)}) does not "
            f"exist; create it (with a dead-letter queue) or set create_queues=True",
            retryable=False,
        )

    # -- the stash: received, not yet handed out ---------------------------------------
    def _stash_locked(self, items: Sequence[_Received]) -> None:
        for item in items:
            self._stash.setdefault(item.route.url, deque()).append(item)

    def _take_stash(self, route: _Route, limit: int, now: float) -> list[_Received]:
        taken: list[_Received] = []
        with self._lock:
            stash = self._stash.get(route.url)
            while stash and len(taken) < limit:
                item = stash.popleft()
                # One whose visibility is (nearly) over may already be someone else's.
                if item.expires_at - now >= _MIN_LEASE_LEFT:
                    taken.append(item)
        return taken

    async def _receive(
        self,
        route: _Route,
        *,
        want: int,
        visibility: int,
        wait: int,
        received_at: float,
        expires_at: float,
        detach: anyio.Event | None = None,
    ) -> list[_Received]:
        """Receive up to ``want`` messages.  With ``detach`` (an event set when the receive
        returns), a cancelled caller does not wait for it: the receive goes on in its thread
        and leaves what it got in the stash for the next lease."""
        transport = self._require_transport()
        box = _Box()
        params = {
            "QueueUrl": route.url,
            "MaxNumberOfMessages": want,
            "VisibilityTimeout": visibility,
            "WaitTimeSeconds": wait,
            "MessageAttributeNames": ["All"],
            "AttributeNames": _SYSTEM_ATTRIBUTES,
        }

        def receive() -> list[_Received]:
            try:
                response = transport.call_sync("ReceiveMessage", **params)
            except QueueError:
                with self._lock:
                    orphan = box.orphan
                if orphan:  # nobody waits for it any more: the next receive will tell
                    return []
                raise
            got = [
                _Received(
                    route=route, message=message, received_at=received_at, expires_at=expires_at
                )
                for message in response.get("Messages", [])
            ]
            with self._lock:
                box.messages, box.done = got, True
                closed = self._closed
                if box.orphan and not closed:
                    self._stash_locked(got)
            if closed and got:
                # The backend closed while this receive ran: show the messages again now.
                self._show_again_sync(transport, got)
            return got

        def work() -> list[_Received]:
            try:
                return receive()
            finally:
                if detach is not None:  # after the stash is filled: the next wait looks there
                    _set_from_thread(detach)

        def detached() -> list[_Received]:
            try:
                return work()
            finally:
                with self._lock:
                    self._detached -= 1
                    client = self._close_later if self._detached == 0 else None
                    if client is not None:
                        self._close_later = None
                if client is not None:
                    _close_client(client)

        if detach is None:
            runner = work
        else:
            runner = detached
            with self._lock:
                self._detached += 1
        try:
            return await transport.run(runner, abandon_on_cancel=detach is not None)
        except BaseException:
            with self._lock:
                box.orphan = True
                if box.done and not self._closed:
                    self._stash_locked(box.messages)
            raise

    def _has_stash(self, route: _Route) -> bool:
        with self._lock:
            return bool(self._stash.get(route.url))

    def _show_again_sync(self, transport: SqsTransport, items: Sequence[_Received]) -> None:
        for url, group in _by_url(items).items():
            entries = [
                {"ReceiptHandle": item.message["ReceiptHandle"], "VisibilityTimeout": 0}
                for item in group
            ]
            try:
                transport.batch_sync("ChangeMessageVisibilityBatch", url, entries)
            except QueueError as exc:
                log.warning("%s: could not release messages: %s", self._where, exc)

    async def _show_again(self, transport: SqsTransport, items: Sequence[_Received]) -> None:
        await transport.run(functools.partial(self._show_again_sync, transport, items))

    # -- producing -------------------------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        if not jobs:
            return
        transport = self._require_transport()
        create = self._config.create_queues
        routes: dict[str, _Route] = {}
        for queue in dict.fromkeys(job.queue for job in jobs):
            route = await self._route(queue, create=create)
            if route is None:
                raise self._missing(queue)
            routes[queue] = route
        # Everything is checked before anything is sent.
        planned: dict[str, tuple[_Route, list[dict[str, Any]]]] = {}
        for index, job in enumerate(jobs):
            route = routes[job.queue]
            entry = self._entry(route, job, index)
            size = entry_size(entry)
            if size > route.max_message_size:
                raise BadArgumentError(
                    "queue/bad-payload",
                    f"{self._where}: job {index} is {size} bytes as an SQS message, over the "
                    f"queue's limit of {route.max_message_size} bytes; nothing was sent. Keep "
                    f"large payloads elsewhere (S3) and enqueue a reference",
                )
            if job.id in self._sent:
                continue  # sent by an earlier try of this same call
            planned.setdefault(route.url, (route, []))[1].append(entry)
            self._quiet.discard(route.url)
        failed: list[tuple[str, str]] = []
        retryable = True
        try:
            for route, entries in planned.values():
                for chunk in chunk_entries(entries, route.max_message_size):
                    response = await transport.call(
                        "SendMessageBatch", QueueUrl=route.url, Entries=chunk
                    )
                    by_id = {entry["Id"]: entry for entry in chunk}
                    for item in response.get("Successful", []):
                        job_id = by_id[item["Id"]]["MessageAttributes"][ATTR_JOB_ID]["StringValue"]
                        _remember(self._sent, job_id, None)
                    for item in response.get("Failed", []):
                        job_id = by_id[item["Id"]]["MessageAttributes"][ATTR_JOB_ID]["StringValue"]
                        failed.append((job_id, f"{item.get('Code')}: {item.get('Message', '')}"))
                        retryable = retryable and not item.get("SenderFault", False)
        except QueueError as exc:
            # Counted over every try of this call (the core's retries resend only the rest):
            # what the caller must not enqueue again.
            stored = [index for index, job in enumerate(jobs) if job.id in self._sent]
            if not stored:
                raise
            raise BackendUnavailableError(
                f"{exc.message}. SQS has no atomic batch: {len(stored)} of {len(jobs)} job(s) "
                f"were stored before the failure (payloads {_spans(stored)} of the list) and "
                f"will run; enqueue only the others again",
                retryable=exc.retryable,
            ) from exc
        if failed:
            detail = "; ".join(f"{job_id}: {reason}" for job_id, reason in failed[:5])
            raise BackendUnavailableError(
                f"{self._where}: SQS refused {len(failed)} of {len(jobs)} job(s) ({detail}); "
                f"the others were stored and will run (SQS has no atomic batch): enqueue only "
                f"the refused ones again",
                retryable=retryable,
            )

    def _entry(self, route: _Route, job: NewJob, index: int) -> dict[str, Any]:
        if job.priority != 0:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{self._where}: SQS has no priorities; leave priority at 0 (got {job.priority})",
            )
        if job.parked or job.depends_on:
            raise UnsupportedError(
                "queue/flow-unsupported",
                f"{self._where}: SQS cannot park flow children until their dependencies are "
                f"done; run flows on a backend with flows (e.g. 'local')",
            )
        delay = ceil_seconds(job.available_at - job.created_at)
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": encode_body(body_of(job))}
        attributes = {ATTR_JOB_ID: string_attribute(job.id)}
        if route.fifo:
            if delay > 0:
                raise BadArgumentError(
                    "queue/bad-argument",
                    f"{self._where}: SQS FIFO queues cannot delay single messages; enqueue "
                    f"with delay=0, or use a standard queue",
                )
            entry["MessageGroupId"] = group_id(job.queue, job.id, self._config.message_group)
            entry["MessageDeduplicationId"] = job.id
        elif delay > messages.MAX_DELAY_SECONDS:
            # Longer than SQS can delay: a placeholder, re-parked until due (see lease()).
            attributes[ATTR_PARK_UNTIL] = number_attribute(job.available_at)
            entry["DelaySeconds"] = messages.MAX_DELAY_SECONDS
        elif delay > 0:
            entry["DelaySeconds"] = delay
        entry["MessageAttributes"] = attributes
        return entry

    # -- consuming -------------------------------------------------------------------------
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        self._require_transport()
        if limit <= 0:
            return []
        route = await self._route(queue, create=self._config.create_queues)
        if route is None:
            raise self._missing(queue)
        visibility = min(max(1, ceil_seconds(lease_seconds)), messages.MAX_VISIBILITY_SECONDS)
        expires_at = now + min(lease_seconds, messages.MAX_VISIBILITY_SECONDS)
        self._asked[queue] = (visibility, limit)
        leases: list[Lease] = []
        chores = _Chores()
        received = self._take_stash(route, limit, now)
        self._classify(received, now, leases, chores)
        # Copies are deleted, not handed out: they leave room for more.
        count = len(received) - len(chores.copies)
        if route.url in self._quiet:
            self._quiet.discard(route.url)
            if not received:
                return []
        while count < limit:
            want = min(MAX_BATCH_ENTRIES, limit - count)
            batch = await self._receive(
                route,
                want=want,
                visibility=visibility,
                wait=0,
                received_at=now,
                expires_at=expires_at,
            )
            copies = len(chores.copies)
            self._classify(batch, now, leases, chores)
            count += len(batch) - (len(chores.copies) - copies)
            if len(batch) < want:
                break
        if chores:
            try:
                await self._do_chores(route, chores, now)
            except QueueError as exc:
                # They come back after their visibility timeout and are dealt with then.
                log.warning(
                    "%s: could not delete copies, re-park or dead-letter messages: %s",
                    self._where,
                    exc,
                )
        leases.sort(key=lambda lease: lease.job.id)
        return leases

    def _classify(
        self, received: Sequence[_Received], now: float, leases: list[Lease], chores: _Chores
    ) -> None:
        handed = {lease.job.id for lease in leases}
        for item in received:
            decoded = decode(item.message)
            if decoded is None:
                chores.foreign.append(item)
                continue
            if decoded.job_id in self._done or decoded.job_id in handed:
                # A copy of a job done here, or of one this lease hands out already: SQS
                # stored a send twice.  (Not checked against leases held from earlier calls: a
                # release re-sends its job while the old lease is still held.)
                chores.copies.append(item)
                continue
            if decoded.park_until is not None:
                chores.parked.append((item, decoded))
                continue
            attempts = _attempts(decoded)
            job = stored_job(decoded, state="inflight", attempts=attempts)
            if attempts > job.max_attempts:
                # Its last attempt's lease expired (the worker died): dead, like the sweep of
                # a store-kept lease would do.
                chores.exhausted.append((item, decoded))
                continue
            token = item.message["ReceiptHandle"]
            self._held[token] = _Held(
                route=item.route,
                token=token,
                job=job,
                decoded=decoded,
                received_at=item.received_at,
            )
            leases.append(Lease(job=job, token=token, expires_at=item.expires_at))
            handed.add(job.id)

    async def _do_chores(self, route: _Route, chores: _Chores, now: float) -> None:
        transport = self._require_transport()
        for url, copies in _by_url(chores.copies).items():
            log.info(
                "%s: deleting %d extra cop(ies) of jobs done or running here (a send SQS "
                "stored twice)",
                self._where,
                len(copies),
            )
            await transport.batch(
                "DeleteMessageBatch",
                url,
                [{"ReceiptHandle": c.message["ReceiptHandle"]} for c in copies],
            )
        moves: list[tuple[str, str, dict[str, Any]]] = []  # (receipt, target url, entry)
        for item in chores.foreign:
            dlq = route.dlq_url
            if dlq is None:
                log.warning("%s: a message on %s is not a blamequeue job", self._where, route.url)
                continue
            entry: dict[str, Any] = {"MessageBody": item.message.get("Body", "")}
            if item.message.get("MessageAttributes"):
                entry["MessageAttributes"] = item.message["MessageAttributes"]
            moves.append(
                (item.message["ReceiptHandle"], dlq, self._fifo_fields(route, entry, None))
            )
        dead: dict[str, StoredJob] = {}
        for item, decoded in chores.exhausted:
            dlq = route.dlq_url
            if dlq is None:
                continue  # the RedrivePolicy backstop has it when there is one
            attempts = _attempts(decoded) - 1
            error = self._expired_error
            receipt = item.message["ReceiptHandle"]
            moves.append(
                (
                    receipt,
                    dlq,
                    self._dead_entry(route, decoded, attempts=attempts, at=now, error=error),
                )
            )
            dead[receipt] = stored_job(
                decoded, state="dead", attempts=attempts, last_error=error, finished_at=now
            )
        changes: list[tuple[str, int]] = []
        for item, decoded in chores.parked:
            assert decoded.park_until is not None
            remaining = decoded.park_until - now
            receipt = item.message["ReceiptHandle"]
            if remaining <= messages.MAX_DELAY_SECONDS:
                body = dict(decoded.body)
                entry = {
                    "MessageBody": encode_body(body),
                    "MessageAttributes": {ATTR_JOB_ID: string_attribute(decoded.job_id)},
                    "DelaySeconds": ceil_seconds(remaining),
                }
                moves.append((receipt, route.url, entry))
            elif (
                route.max_receive_count is not None
                and decoded.receive_count + 1 >= route.max_receive_count
            ):
                # Re-parked often enough to meet the RedrivePolicy: a fresh placeholder.
                entry = {
                    "MessageBody": item.message["Body"],
                    "MessageAttributes": item.message.get("MessageAttributes", {}),
                    "DelaySeconds": messages.MAX_DELAY_SECONDS,
                }
                moves.append((receipt, route.url, entry))
            else:
                hide = min(
                    ceil_seconds(remaining) - messages.MAX_DELAY_SECONDS,
                    messages.MAX_VISIBILITY_SECONDS - _MOVE_VISIBILITY,
                )
                changes.append((receipt, max(1, hide)))
        if changes:
            await transport.batch(
                "ChangeMessageVisibilityBatch",
                route.url,
                [{"ReceiptHandle": r, "VisibilityTimeout": seconds} for r, seconds in changes],
            )
        if moves:
            moved = await self._move(route, moves)
            self._dead_at_lease += [job for receipt, job in dead.items() if receipt in moved]

    async def _move(
        self, route: _Route, moves: Sequence[tuple[str, str, dict[str, Any]]]
    ) -> set[str]:
        """Send each entry to its target queue, then delete the original message (by receipt)
        from ``route``.  Returns the receipts moved.  Not atomic: a crash between the two
        leaves both (at least once)."""
        transport = self._require_transport()
        by_target: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for receipt, target, entry in moves:
            by_target.setdefault(target, []).append((receipt, entry))
        moved: list[str] = []
        problems: list[str] = []
        for target, items in by_target.items():
            entries = [{**entry, "Id": str(n)} for n, (_receipt, entry) in enumerate(items)]
            receipts = {str(n): receipt for n, (receipt, _entry) in enumerate(items)}
            for chunk in chunk_entries(entries, _DEFAULT_MAX_MESSAGE):
                response = await transport.call("SendMessageBatch", QueueUrl=target, Entries=chunk)
                moved += [receipts[item["Id"]] for item in response.get("Successful", [])]
                problems += [
                    f"{item.get('Code')}: {item.get('Message', '')}"
                    for item in response.get("Failed", [])
                ]
        if moved:
            _deleted, failed = await transport.batch(
                "DeleteMessageBatch", route.url, [{"ReceiptHandle": r} for r in moved]
            )
            for item in failed.values():
                log.warning(
                    "%s: moved a message but could not delete the original (%s); it may be "
                    "delivered again",
                    self._where,
                    item.get("Code"),
                )
        if problems:
            raise BackendUnavailableError(
                f"{self._where}: SQS refused to take {len(problems)} message(s): "
                f"{'; '.join(problems[:3])}"
            )
        return set(moved)

    def _fifo_fields(
        self, route: _Route, entry: dict[str, Any], decoded: Decoded | None
    ) -> dict[str, Any]:
        if route.fifo:
            if decoded is not None:
                entry["MessageGroupId"] = group_id(
                    decoded.queue, decoded.job_id, self._config.message_group
                )
                entry["MessageDeduplicationId"] = f"{decoded.job_id}.{secrets.token_hex(8)}"
            else:
                entry["MessageGroupId"] = "foreign"
                entry["MessageDeduplicationId"] = secrets.token_hex(16)
        return entry

    def _dead_entry(
        self, route: _Route, decoded: Decoded, *, attempts: int, at: float, error: str | None
    ) -> dict[str, Any]:
        body = {key: value for key, value in decoded.body.items() if key != "attempts_before"}
        body["attempts"] = attempts
        body["failed_at"] = at
        attributes = {ATTR_JOB_ID: string_attribute(decoded.job_id)}
        if error is not None:
            attributes[ATTR_ERROR] = string_attribute(error)
        entry = {"MessageBody": encode_body(body), "MessageAttributes": attributes}
        return self._fifo_fields(route, entry, decoded)

    def _fresh_entry(
        self, route: _Route, decoded: Decoded, *, attempts_before: int
    ) -> dict[str, Any]:
        """A new message for a job going back to its queue (fresh receive count)."""
        body = {
            key: value
            for key, value in decoded.body.items()
            if key not in ("attempts", "failed_at", "attempts_before")
        }
        if attempts_before > 0:
            body["attempts_before"] = attempts_before
        entry = {
            "MessageBody": encode_body(body),
            "MessageAttributes": {ATTR_JOB_ID: string_attribute(decoded.job_id)},
        }
        return self._fifo_fields(route, entry, decoded)

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        if not settlements:
            return []
        self._require_transport()
        results: list[bool | None] = [None] * len(settlements)
        deletes: list[tuple[int, _Held]] = []
        changes: list[tuple[int, _Held, int]] = []
        moves: list[tuple[int, _Held, str, dict[str, Any]]] = []
        seen: set[tuple[str, str]] = set()
        for index, item in enumerate(settlements):
            if item.outcome not in _OUTCOMES:
                raise BadArgumentError(
                    "queue/bad-argument",
                    f"settlement outcome must be one of {sorted(_OUTCOMES)}, got {item.outcome!r}",
                )
            key = (item.job_id, item.token)
            if key in seen:
                results[index] = False  # a repeated settlement is stale: applied once
                continue
            seen.add(key)
            held = self._held.get(item.token)
            if held is None or held.job.id != item.job_id:
                results[index] = self._settled.get(item.token, False) if held is None else False
                continue
            if held.lost:
                results[index] = self._forget(held, False)
                continue
            route = held.route
            if item.outcome == "done":
                deletes.append((index, held))
            elif item.outcome == "retry":
                elapsed = ceil_seconds(now - held.received_at)
                longest = max(0, messages.MAX_VISIBILITY_SECONDS - elapsed - 1)
                changes.append((index, held, min(ceil_seconds(item.at - now), longest)))
            elif item.outcome == "release" and route.fifo:
                changes.append((index, held, 0))  # FIFO: keep the order, spend the attempt
            elif item.outcome == "release":
                entry = self._fresh_entry(
                    route, held.decoded, attempts_before=held.job.attempts - 1
                )
                moves.append((index, held, route.url, entry))
            else:
                dlq = self._require_dlq(route)
                entry = self._dead_entry(
                    route, held.decoded, attempts=held.job.attempts, at=item.at, error=item.error
                )
                moves.append((index, held, dlq, entry))

        problems: list[str] = []
        if deletes:
            await self._apply(
                "DeleteMessageBatch",
                [(index, held, {}) for index, held in deletes],
                results,
                problems,
            )
            for index, held in deletes:
                if results[index]:
                    _remember(self._done, held.job.id, None)
        if changes:
            await self._apply(
                "ChangeMessageVisibilityBatch",
                [(index, held, {"VisibilityTimeout": s}) for index, held, s in changes],
                results,
                problems,
            )
        if moves:
            await self._settle_moves(moves, results, problems)
        if problems:
            raise BackendUnavailableError(
                f"{self._where}: SQS failed {len(problems)} settlement(s) "
                f"({'; '.join(problems[:3])}); the others were applied"
            )
        return [bool(result) for result in results]

    def _forget(self, held: _Held, applied: bool) -> bool:
        self._held.pop(held.token, None)
        _remember(self._settled, held.token, applied)
        return applied

    async def _apply(
        self,
        action: str,
        items: Sequence[tuple[int, _Held, dict[str, Any]]],
        results: list[bool | None],
        problems: list[str],
        *,
        forget: bool = True,
    ) -> list[int]:
        """Run a batch action on the receipts of ``items`` (grouped by queue, 10 per call) and
        record each outcome; returns the indexes it applied."""
        transport = self._require_transport()
        applied: list[int] = []
        by_url: dict[str, list[tuple[int, _Held, dict[str, Any]]]] = {}
        for item in items:
            by_url.setdefault(item[1].route.url, []).append(item)
        for url, group in by_url.items():
            done, failed = await transport.batch(
                action, url, [{"ReceiptHandle": held.token, **extra} for _i, held, extra in group]
            )
            for position, (index, held, _extra) in enumerate(group):
                if position in done:
                    applied.append(index)
                    if forget:
                        results[index] = self._forget(held, True)
                    continue
                failure = failed.get(position, {})
                code, text = str(failure.get("Code", "")), str(failure.get("Message", ""))
                if is_stale(code, text):
                    results[index] = self._forget(held, False)
                else:
                    problems.append(f"{held.job.id}: {code or 'no answer'}: {text}")
        return applied

    async def _settle_moves(
        self,
        moves: Sequence[tuple[int, _Held, str, dict[str, Any]]],
        results: list[bool | None],
        problems: list[str],
    ) -> None:
        # Fence first: only a receipt that still owns its message is moved, so a lost lease
        # never puts a copy in the dead-letter queue.
        fenced = set(
            await self._apply(
                "ChangeMessageVisibilityBatch",
                [
                    (index, held, {"VisibilityTimeout": _MOVE_VISIBILITY})
                    for index, held, _t, _e in moves
                ],
                results,
                problems,
                forget=False,
            )
        )
        by_route: dict[str, list[tuple[int, _Held, str, dict[str, Any]]]] = {}
        for move in moves:
            if move[0] in fenced:
                by_route.setdefault(move[1].route.url, []).append(move)
        for group in by_route.values():
            route = group[0][1].route
            try:
                moved = await self._move(
                    route, [(held.token, target, entry) for _index, held, target, entry in group]
                )
            except BackendUnavailableError as exc:
                problems.append(exc.message)
                moved = set()
            for index, held, _target, _entry in group:
                if held.token in moved:
                    results[index] = self._forget(held, True)

    async def extend(self, leases: Sequence[tuple[str, str]], *, expires_at: float) -> list[bool]:
        if not leases:
            return []
        self._require_transport()
        now = self.context.clock.now()
        results: list[bool | None] = [None] * len(leases)
        items: list[tuple[int, _Held, dict[str, Any]]] = []
        capped: set[int] = set()
        for index, (job_id, token) in enumerate(leases):
            held = self._held.get(token)
            if held is None or held.job.id != job_id or held.lost:
                results[index] = False
                continue
            seconds = max(1, ceil_seconds(expires_at - now))
            longest = messages.MAX_VISIBILITY_SECONDS - ceil_seconds(now - held.received_at) - 1
            if seconds > longest:
                seconds = max(0, longest)  # SQS holds one receipt for 12 h at most
                capped.add(index)
            items.append((index, held, {"VisibilityTimeout": seconds}))
        problems: list[str] = []
        stale_before = {index for index, result in enumerate(results) if result is False}
        applied = set(
            await self._apply(
                "ChangeMessageVisibilityBatch", items, results, problems, forget=False
            )
        )
        for index, held, _extra in items:
            if index in applied:
                results[index] = index not in capped
            elif results[index] is False and index not in stale_before:
                held.lost = True
        if problems:
            raise BackendUnavailableError(
                f"{self._where}: SQS failed to extend {len(problems)} lease(s): "
                f"{'; '.join(problems[:3])}"
            )
        return [bool(result) for result in results]

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        # SQS expires leases itself (the visibility timeout) and deletes done jobs at once, so
        # there is nothing to recover or prune.  What the sweep reports: jobs a lease found
        # with their attempts exhausted (their worker died) and moved to the dead-letter queue.
        self._expired_error = expired_error
        for token, held in list(self._held.items()):
            if now - held.received_at > messages.MAX_VISIBILITY_SECONDS + _MOVE_VISIBILITY:
                del self._held[token]  # no receipt outlives 12 h: never settled, now stale
        dead, self._dead_at_lease = self._dead_at_lease, []
        return SweepResult(dead=dead)

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Long polling: a ReceiveMessage that waits up to ``timeout`` (at most 20 s) for a
        message from any process; what it receives waits in the stash for the next lease."""
        wait = min(_MAX_WAIT_SECONDS, int(timeout)) if timeout >= 1 else 0
        route = None
        if wait >= 1 and self._transport is not None:
            route = await self._route(queue, create=False)
        if route is None:
            await anyio.sleep(max(0.0, timeout))
            return
        with anyio.move_on_after(max(0.0, timeout)):
            earlier = self._polls.get(route.url)
            if earlier is not None:
                # A long poll whose waiter was cancelled may still listen: wait for it rather
                # than ask twice; what it receives lands in the stash.
                await earlier.wait()
            if self._has_stash(route):
                return
            visibility, limit = self._asked.get(queue, (_DEFAULT_VISIBILITY, MAX_BATCH_ENTRIES))
            now = self.context.clock.now()
            done = self._polls[route.url] = anyio.Event()
            got = await self._receive(
                route,
                want=min(MAX_BATCH_ENTRIES, limit),
                visibility=visibility,
                wait=wait,
                received_at=now,
                expires_at=now + visibility,
                detach=done,  # a same-process enqueue ends the wait at once
            )
            if got:
                with self._lock:
                    if not self._closed:
                        self._stash_locked(got)
            else:  # the whole wait passed without a message
                self._quiet.add(route.url)

    # -- inspecting and operating ---------------------------------------------------------
    async def _counts(self, url: str, names: Sequence[str]) -> int:
        response = await self._require_transport().call(
            "GetQueueAttributes", QueueUrl=url, AttributeNames=list(names)
        )
        attributes = response.get("Attributes", {})
        return sum(int(attributes.get(name, 0)) for name in names)

    async def size(self, queue: str) -> int:
        self._require_transport()
        route = await self._route(queue, create=False)
        if route is None:
            return 0
        return await self._counts(
            route.url,
            (
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ),
        )

    async def purge(self, queue: str) -> int:
        count = await self.size(queue)
        if count == 0:
            return 0  # SQS allows one PurgeQueue a minute: do not spend it on nothing
        route = await self._route(queue, create=False)
        assert route is not None
        await self._require_transport().call("PurgeQueue", QueueUrl=route.url)
        for held in self._held.values():
            if held.route is route:
                held.lost = True
        with self._lock:
            self._stash.pop(route.url, None)
        return count

    async def _dlq_route(self, queue: str) -> tuple[_Route, str] | None:
        self._require_transport()
        route = await self._route(queue, create=False)
        if route is None:
            return None
        return route, self._require_dlq(route)

    def _belongs(self, decoded: Decoded | None, route: _Route) -> bool:
        if decoded is None:
            return False
        try:
            url = self._url_for(decoded.queue)
        except QueueError:
            return False
        known = self._routes.get(url)
        return (known.url if known is not None else url) == route.url

    async def _scan(
        self, dlq_url: str, *, stop: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        """Receive the visible messages of a dead-letter queue, hidden while scanning; the
        caller shows them again (or deletes them)."""
        transport = self._require_transport()
        found: dict[str, dict[str, Any]] = {}
        while True:
            response = await transport.call(
                "ReceiveMessage",
                QueueUrl=dlq_url,
                MaxNumberOfMessages=MAX_BATCH_ENTRIES,
                VisibilityTimeout=_SCAN_VISIBILITY,
                WaitTimeSeconds=self._config.dlq_scan_wait,
                MessageAttributeNames=["All"],
                AttributeNames=_SYSTEM_ATTRIBUTES,
            )
            batch = [m for m in response.get("Messages", []) if m["MessageId"] not in found]
            if not batch:
                return list(found.values())
            for message in batch:
                found[message["MessageId"]] = message
            if stop is not None and any(stop(message) for message in batch):
                return list(found.values())

    async def _dlq_batch(self, action: str, dlq_url: str, found: Sequence[dict[str, Any]]) -> int:
        """Delete (or show again) scanned dead letters; returns how many SQS accepted."""
        extra = {"VisibilityTimeout": 0} if action == "ChangeMessageVisibilityBatch" else {}
        done, _failed = await self._require_transport().batch(
            action, dlq_url, [{"ReceiptHandle": m["ReceiptHandle"], **extra} for m in found]
        )
        return len(done)

    def _dead_letter(self, route: _Route, decoded: Decoded) -> StoredJob:
        body = decoded.body
        attempts = body.get("attempts")
        if not isinstance(attempts, int):
            # Moved by the RedrivePolicy, not by blamequeue: it was received maxReceiveCount
            # times.
            attempts = _attempts(decoded, route.max_receive_count)
        failed_at = body.get("failed_at")
        return stored_job(
            decoded,
            state="dead",
            attempts=attempts,
            last_error=decoded.last_error,
            finished_at=float(failed_at) if isinstance(failed_at, int | float) else decoded.sent_at,
        )

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        target = await self._dlq_route(queue)
        if target is None:
            return []
        route, dlq_url = target
        found = await self._scan(dlq_url)
        try:
            jobs = []
            for message in found:
                decoded = decode(message)
                if decoded is not None and self._belongs(decoded, route):
                    jobs.append(self._dead_letter(route, decoded))
        finally:
            with anyio.CancelScope(shield=True):
                await self._dlq_batch("ChangeMessageVisibilityBatch", dlq_url, found)
        jobs.sort(key=lambda job: (job.finished_at or 0.0, job.id), reverse=True)
        return jobs if limit is None else jobs[: max(0, limit)]

    async def dlq_size(self, queue: str) -> int:
        target = await self._dlq_route(queue)
        if target is None:
            return 0
        return await self._counts(
            target[1], ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
        )

    async def dlq_purge(self, queue: str) -> int:
        target = await self._dlq_route(queue)
        if target is None:
            return 0
        route, dlq_url = target
        found = await self._scan(dlq_url)
        mine = [m for m in found if self._belongs(decode(m), route)]
        others = [m for m in found if not self._belongs(decode(m), route)]
        with anyio.CancelScope(shield=True):
            if others:
                await self._dlq_batch("ChangeMessageVisibilityBatch", dlq_url, others)
            deleted = await self._dlq_batch("DeleteMessageBatch", dlq_url, mine)
        return deleted

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        self._require_transport()
        # The dead-letter queues this process knows: those of the configured queues and of
        # the templated ones it used.
        dlqs: dict[str, _Route] = {}
        for route in list(self._routes.values()):
            if route.dlq_url is not None:
                dlqs.setdefault(route.dlq_url, route)
        for dlq_url, route in dlqs.items():

            def wanted(message: dict[str, Any]) -> bool:
                attribute = message.get("MessageAttributes", {}).get(ATTR_JOB_ID, {})
                return bool(attribute.get("StringValue") == job_id)

            found = await self._scan(dlq_url, stop=wanted)
            match = next((m for m in found if wanted(m) and decode(m) is not None), None)
            hidden = list(found)
            try:
                if match is None:
                    continue
                decoded = decode(match)
                assert decoded is not None
                source = await self._route(decoded.queue, create=self._config.create_queues)
                if source is None:
                    source = route
                job = self._dead_letter(source, decoded)
                entry = self._fresh_entry(source, decoded, attempts_before=0)
                await self._require_transport().call(
                    "SendMessage",
                    QueueUrl=source.url,
                    **{key: value for key, value in entry.items() if key != "Id"},
                )
                hidden.remove(match)
                with anyio.CancelScope(shield=True):
                    await self._dlq_batch("DeleteMessageBatch", dlq_url, [match])
                return job
            finally:
                if hidden:
                    with anyio.CancelScope(shield=True):
                        await self._dlq_batch("ChangeMessageVisibilityBatch", dlq_url, hidden)
        return None


def _attempts(decoded: Decoded, receive_count: int | None = None) -> int:
    """The job's attempts: SQS's receive count, plus attempts made on earlier messages of the
    same job (a message re-sent when a worker released it at shutdown)."""
    before = decoded.body.get("attempts_before", 0)
    count = decoded.receive_count if receive_count is None else receive_count
    return count + (before if isinstance(before, int) and before > 0 else 0)


def _spans(indexes: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2, 5"`` (sorted indexes)."""
    spans: list[list[int]] = []
    for index in indexes:
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _set_from_thread(event: anyio.Event) -> None:
    """Set ``event`` from the worker thread of a receive, if its event loop still runs."""
    try:
        anyio.from_thread.run_sync(event.set)
    except Exception as exc:  # the loop is gone: nobody waits any more
        log.debug("could not signal the end of a long poll: %r", exc)


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # closing is best effort; the sockets go with the client
            log.debug("closing the boto3 client failed: %r", exc)


def _by_url(items: Sequence[_Received]) -> dict[str, list[_Received]]:
    grouped: dict[str, list[_Received]] = {}
    for item in items:
        grouped.setdefault(item.route.url, []).append(item)
    return grouped
