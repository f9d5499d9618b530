"""Routing: which SQS queue holds a queue name's jobs.

:class:`Router` owns the map from queue name to SQS queue: a name listed in ``queue_urls`` has
its own, every other one shares ``queue_url`` (or, when that URL holds ``{queue}``, gets the
SQS queue the name makes).  Each SQS queue is resolved once, on first use (the configured ones
when the backend opens): GetQueueAttributes for its MaximumMessageSize and RedrivePolicy,
GetQueueUrl for the dead-letter queue the policy names, and with ``create_queues`` CreateQueue
for a missing queue and its ``<name>-dlq``.  A :class:`Route` is what the other parts know of
an SQS queue: its URL, whether it is FIFO (a URL ending ``.fifo``), its size limit and its
dead-letter queue.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Final

import anyio
import attrs

from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError
from blamequeue_sqs._messages import DEFAULT_MAX_MESSAGE_BYTES, Decoded
from blamequeue_sqs._options import QUEUE_PLACEHOLDER, SqsOptions
from blamequeue_sqs._sqs_errors import is_missing_queue
from blamequeue_sqs._transport import Connection

__all__ = ["Route", "Router", "infer_region"]

log = logging.getLogger("blamequeue.sqs")

_SQS_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_REGION_IN_HOST: Final = re.compile(
    r"^https?://(?:sqs[.-]([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com", re.IGNORECASE
)
_ROUTE_ATTRIBUTES: Final = ["RedrivePolicy", "MaximumMessageSize"]


@attrs.define(eq=False)
class Route:
    """One SQS queue, as resolved (and perhaps created) on first use."""

    url: str
    fifo: bool
    max_message_size: int = DEFAULT_MAX_MESSAGE_BYTES
    dlq_url: str | None = None
    max_receive_count: int | None = None


def infer_region(url: str | None) -> str | None:
    """The AWS region an SQS queue URL names (``https://sqs.eu-west-1.amazonaws.com/…``)."""
    if url is None:
        return None
    match = _REGION_IN_HOST.match(url)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@attrs.define(eq=False)
class Router:
    """Queue name → :class:`Route`, resolved once per SQS queue while the backend is open."""

    _config: SqsOptions
    _connection: Connection
    # By the URL the options give (a queue created on first use may answer with another).
    _routes: dict[str, Route] = attrs.field(init=False, factory=dict)
    _locks: dict[str, anyio.Lock] = attrs.field(init=False, factory=dict)

    async def open(self) -> None:
        """Resolve the configured SQS queues (a missing one is an error unless the backend
        creates queues)."""
        config = self._config
        static = list(config.queue_urls.values())
        if config.queue_url is not None and not config.templated:
            static.append(config.queue_url)
        for url in dict.fromkeys(static):
            route = await self._resolve(url, create=config.create_queues, required=True)
            assert route is not None
            self._routes[url] = route

    def clear(self) -> None:
        """Forget every route (the backend closed: its locks belong to that event loop)."""
        self._routes.clear()
        self._locks.clear()

    def known(self) -> list[Route]:
        """The routes resolved so far: the configured queues and the templated ones used."""
        return list(self._routes.values())

    def url_for(self, queue: str) -> str:
        """The URL of the SQS queue of ``queue`` (no request made)."""
        config = self._config
        where = self._connection.where
        url = config.queue_urls.get(queue)
        if url is not None:
            return url
        if config.queue_url is None:
            raise ConfigError(
                "queue/invalid-config",
                f"{where}: queue {queue!r} has no SQS queue: add it to 'queue_urls' or "
                f"set 'queue_url'",
            )
        if not config.templated:
            return config.queue_url
        url = config.queue_url.replace(QUEUE_PLACEHOLDER, queue)
        name = _queue_name(url)
        base = name.removesuffix(".fifo")
        longest = 76 if config.create_queues else 80  # room for "-dlq"
        if not _SQS_NAME.fullmatch(base) or len(name) > 80 or len(base) > longest:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{where}: queue name {queue!r} makes the SQS queue name {name!r}, which "
                f"SQS refuses: use letters, digits, '-' and '_' (at most {longest} characters "
                f"in all), or map the name in 'queue_urls'",
            )
        return url

    async def route(self, queue: str, *, create: bool) -> Route | None:
        """The SQS queue of ``queue``; ``None`` when it does not exist (templated URLs only)."""
        url = self.url_for(queue)
        route = self._routes.get(url)
        if route is not None:
            return route
        lock = self._locks.get(url)
        if lock is None:
            lock = self._locks[url] = anyio.Lock()
        async with lock:
            route = self._routes.get(url)
            if route is None:
                route = await self._resolve(url, create=create, required=False)
                if route is not None:
                    self._routes[url] = route
            return route

    async def require(self, queue: str) -> Route:
        """The SQS queue of ``queue``, created first with ``create_queues``; a missing one is
        a non-retryable ``queue/backend-unavailable`` saying how to make it."""
        route = await self.route(queue, create=self._config.create_queues)
        if route is None:
            raise BackendUnavailableError(
                f"{self._connection.where}: the SQS queue of {queue!r} ({self.url_for(queue)}) "
                f"does not exist; create it (with a dead-letter queue) or set create_queues=True",
                retryable=False,
            )
        return route

    def require_dlq(self, route: Route) -> str:
        """The dead-letter queue of ``route``; ``queue/invalid-config`` saying how to give it
        one when it has none."""
        if route.dlq_url is None:
            raise ConfigError(
                "queue/invalid-config",
                f"{self._connection.where}: SQS queue {route.url} has no dead-letter queue: "
                f"give it a RedrivePolicy (`aws sqs set-queue-attributes --queue-url URL "
                f"--attributes RedrivePolicy=...`, see docs/backends/sqs.md) or set the option "
                f"'dlq_url'",
            )
        return route.dlq_url

    def belongs(self, decoded: Decoded | None, route: Route) -> bool:
        """Whether a message's job was enqueued to a queue name routed to ``route`` (queues
        sharing one SQS queue share its dead-letter queue too)."""
        if decoded is None:
            return False
        try:
            url = self.url_for(decoded.queue)
        except QueueError:
            return False
        known = self._routes.get(url)
        return (known.url if known is not None else url) == route.url

    async def _resolve(self, url: str, *, create: bool, required: bool) -> Route | None:
        transport = self._connection.require()
        try:
            response = await transport.call(
                "GetQueueAttributes", QueueUrl=url, AttributeNames=_ROUTE_ATTRIBUTES
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
                "GetQueueAttributes", QueueUrl=actual, AttributeNames=_ROUTE_ATTRIBUTES
            )
        attributes = response.get("Attributes", {})
        route = Route(url=actual, fifo=actual.endswith(".fifo"))
        try:
            route.max_message_size = int(
                attributes.get("MaximumMessageSize", DEFAULT_MAX_MESSAGE_BYTES)
            )
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
                log.warning(
                    "%s: unreadable RedrivePolicy on %s: %r", self._connection.where, url, redrive
                )
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
                f"{self._connection.where}: the RedrivePolicy names {arn!r}, which is not an "
                f"SQS queue ARN",
            )
        response = await self._connection.require().call(
            "GetQueueUrl", QueueName=parts[5], QueueOwnerAWSAccountId=parts[4]
        )
        return str(response["QueueUrl"])

    async def _create_queue(self, url: str) -> str:
        """Create the queue ``url`` names, with its dead-letter queue and RedrivePolicy."""
        transport = self._connection.require()
        name = _queue_name(url)
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
        log.info(
            "%s: created SQS queue %s (dead letters: %s)", self._connection.where, name, dlq_name
        )
        return str(created["QueueUrl"])
