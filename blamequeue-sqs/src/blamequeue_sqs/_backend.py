"""The ``sqs`` backend: :class:`SqsBackend`, jobs as messages of AWS SQS queues (SPEC §5.3).

The SQS-native model: SQS keeps the lease itself (the visibility timeout), so the backend maps
each transition onto the SQS call that does it and keeps no state of its own beyond the leases
this process holds.  :class:`SqsBackend` opens and closes the boto3 client and hands each
operation to the part that owns it; the parts share one
:class:`~blamequeue_sqs._transport.Connection` and never import this module:

========================  =====================================================  ==============
operation                 SQS calls                                              part
========================  =====================================================  ==============
open                      GetQueueAttributes, GetQueueUrl (dead-letter queue),   ``_routing``
                          CreateQueue with ``create_queues``
close                     ChangeMessageVisibilityBatch to 0 for what was         ``_inbox``
                          received and not handed out
enqueue / enqueue_many    SendMessageBatch (10 per call, split by size)          ``_sending``
lease                     ReceiveMessage (up to 10 per call; VisibilityTimeout   ``_receiving``
                          = lease), in a worker thread                           ``_inbox``
wait_for_work (idle)      ReceiveMessage with WaitTimeSeconds (long polling),    ``_receiving``
                          its messages kept for the next lease                   ``_inbox``
copies of a job           DeleteMessageBatch, at lease (a send stored twice:     ``_receiving``
                          its answer was lost and the retry sent it again)
delay beyond 900 s        at lease: ChangeMessageVisibilityBatch (re-park), or   ``_receiving``
                          SendMessageBatch + DeleteMessageBatch once due
settle ``done``           DeleteMessageBatch (the settlements of a batch, 10     ``_settling``
                          per call)
settle ``retry``          ChangeMessageVisibilityBatch to the backoff delay      ``_settling``
settle ``dead``           ChangeMessageVisibilityBatch (fence),                  ``_settling``
                          SendMessageBatch to the dead-letter queue,
                          DeleteMessageBatch
settle ``release``        same as ``dead`` but back to the queue, the attempt    ``_settling``
                          given back (FIFO: ChangeMessageVisibilityBatch to 0,
                          keeping the order)
extend (heartbeat)        ChangeMessageVisibilityBatch                           ``_settling``
size                      GetQueueAttributes                                     here
purge                     GetQueueAttributes, PurgeQueue                         here
dlq_size                  GetQueueAttributes on the dead-letter queue            ``_dead_letters``
dlq_list / retry / purge  ReceiveMessage over the dead-letter queue, then        ``_dead_letters``
                          ChangeMessageVisibilityBatch / SendMessage /
                          DeleteMessageBatch
========================  =====================================================  ==============

Below the parts: :mod:`._messages` (how a job travels as a message: body, attributes, the
entries sent), :mod:`._transport` (boto3 in worker threads, the batch calls, moving messages
between queues), :mod:`._sqs_errors` (boto3 errors mapped to
:class:`~blamequeue.errors.QueueError`), :mod:`._options` and :mod:`._memo`.  The receipt
handle of a received message is the lease token; ``attempts`` is SQS's ApproximateReceiveCount.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import anyio

from blamequeue.abc import (
    BackendContext,
    Lease,
    NewJob,
    Settlement,
    StoredJob,
    SweepResult,
    Wakeup,
)
from blamequeue.abc import (
    DeadLetters as DeadLettersFacet,
)
from blamequeue_sqs._dead_letters import DeadLetters
from blamequeue_sqs._inbox import Inbox, close_client
from blamequeue_sqs._options import MAX_WAIT_SECONDS, SqsOptions, parse_options
from blamequeue_sqs._receiving import Receiver
from blamequeue_sqs._routing import Router, infer_region
from blamequeue_sqs._sending import Sender
from blamequeue_sqs._settling import Settler
from blamequeue_sqs._sqs_errors import map_error
from blamequeue_sqs._transport import NO_BOTOCORE_RETRIES, Connection, SqsTransport, botocore_tries

__all__ = ["SqsBackend"]

log = logging.getLogger("blamequeue.sqs")

# boto3's default session makes clients; doing so is not thread-safe.
_CLIENT_LOCK: Final = threading.Lock()


class SqsBackend(DeadLettersFacet, Wakeup):
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
    # A message queue: SQS keeps visibility timeouts and delays on its own clock, orders by
    # no priority, and deletes a message when its job completes.
    priority: ClassVar[bool] = False
    requires_seal_key: ClassVar[bool] = True
    store_clock: ClassVar[bool] = True
    keeps_done: ClassVar[bool] = False
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
        self._connection = Connection(where=f"sqs backend {context.name!r}")
        self._owned_client: Any = None
        self._router = Router(self._config, self._connection)
        self._settler = Settler(self._config, self._connection, self._router)
        self._inbox = Inbox(self._connection)
        self._receiver = Receiver(
            self._config,
            self._connection,
            self._router,
            self._settler,
            self._inbox,
            clock=context.clock,
        )
        self._sender = Sender(
            self._config, self._connection, self._router, on_send=self._receiver.expect
        )
        self._dead_letters = DeadLetters(self._config, self._connection, self._router)

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        if self._connection.is_open:
            return
        config = self._config
        where = self._connection.where
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
                    where,
                    tries,
                    tries,
                )
        self._connection.opened(
            SqsTransport(client, limit=config.max_in_flight_requests, where=where)
        )
        self._inbox.open()
        try:
            await self._router.open()
        except BaseException:
            await self.close()
            raise

    def _make_client(self) -> Any:
        # Imported here: loading the plugin (every Queue does) should not pay for boto3.
        import boto3
        import botocore.config
        import botocore.exceptions

        config = self._config
        region = config.region or infer_region(config.queue_url)
        if region is None:
            region = next(filter(None, map(infer_region, config.queue_urls.values())), None)
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
                        read_timeout=MAX_WAIT_SECONDS + 10,
                    ),
                )
        except botocore.exceptions.BotoCoreError as exc:
            raise map_error(exc, where=self._connection.where, action="client") from exc

    async def close(self) -> None:
        await self._inbox.close()
        self._receiver.close()
        self._connection.closed()
        self._router.clear()
        owned, self._owned_client = self._owned_client, None
        if owned is not None and not self._inbox.close_client_later(owned):
            await anyio.to_thread.run_sync(close_client, owned)

    # -- producing and consuming -----------------------------------------------------------
    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        await self._sender.enqueue(jobs)

    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        return await self._receiver.lease(queue, limit=limit, now=now, lease_seconds=lease_seconds)

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        return await self._settler.settle(settlements, now=now)

    async def extend(self, leases: Sequence[tuple[str, str]], *, expires_at: float) -> list[bool]:
        return await self._settler.extend(
            leases, expires_at=expires_at, now=self.context.clock.now()
        )

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        # SQS expires leases itself (the visibility timeout) and deletes done jobs at once, so
        # there is nothing to recover or prune.  What the sweep reports: jobs a lease found
        # with their attempts exhausted (their worker died) and moved to the dead-letter queue.
        self._settler.drop_stale(now)
        return SweepResult(dead=self._receiver.swept(expired_error))

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Long polling: a ReceiveMessage that waits up to ``timeout`` (at most 20 s) for a
        message from any process; what it receives waits in the stash for the next lease."""
        await self._receiver.wait_for_work(queue, timeout=timeout)

    # -- inspecting and operating ---------------------------------------------------------
    async def size(self, queue: str) -> int:
        transport = self._connection.require()
        route = await self._router.route(queue, create=False)
        if route is None:
            return 0
        return await transport.count(
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
        route = await self._router.route(queue, create=False)
        assert route is not None
        await self._connection.require().call("PurgeQueue", QueueUrl=route.url)
        self._settler.lose(route)
        self._inbox.drop(route)
        return count

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        return await self._dead_letters.jobs(queue, limit=limit)

    async def dlq_size(self, queue: str) -> int:
        return await self._dead_letters.size(queue)

    async def dlq_purge(self, queue: str) -> int:
        return await self._dead_letters.purge(queue)

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        return await self._dead_letters.retry(job_id)
