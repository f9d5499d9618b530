"""boto3 calls from anyio worker threads (:class:`SqsTransport`: single calls, the batch
calls every part of the backend makes, moving messages between queues), the backend's hold on
its transport while it is open (:class:`Connection`), and a client wrapper that counts SQS
requests (:class:`CountingClient`)."""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from blamequeue.abc import StoreGuard
from blamequeue.errors import BackendUnavailableError
from blamequeue_sqs._messages import DEFAULT_MAX_MESSAGE_BYTES, MAX_BATCH_ENTRIES, chunk_entries
from blamequeue_sqs._sqs_errors import entry_failure, map_error

__all__ = [
    "NO_BOTOCORE_RETRIES",
    "Connection",
    "CountingClient",
    "SqsTransport",
    "botocore_tries",
    "group_by",
]

log = logging.getLogger("blamequeue.sqs")

#: The ``retries`` of every boto3 client the backend makes: one try per request, so the
#: backend's ``retry`` policy is the only one that retries and the breaker hears of every fault.
NO_BOTOCORE_RETRIES: Final = {"mode": "standard", "total_max_attempts": 1}
# botocore's own default tries per request, by retry mode.
_DEFAULT_TRIES: Final = {"legacy": 5, "standard": 3, "adaptive": 3}

T = TypeVar("T")

K = TypeVar("K")

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def group_by(items: Sequence[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` by ``key`` (a queue URL, mostly: SQS batch calls name one queue), in order."""
    grouped: dict[K, list[T]] = {}
    for item in items:
        grouped.setdefault(key(item), []).append(item)
    return grouped


def method_name(action: str) -> str:
    """``ReceiveMessage`` → ``receive_message`` (the boto3 client method of an SQS action)."""
    return _CAMEL.sub("_", action).lower()


def botocore_tries(client: Any) -> int | None:
    """How many times botocore tries each request of ``client`` (a boto3 client, or a
    :class:`CountingClient` around one); ``None`` when it does not tell."""
    retries = getattr(getattr(getattr(client, "meta", None), "config", None), "retries", None)
    if not isinstance(retries, Mapping):
        return None
    total = retries.get("total_max_attempts")
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    return _DEFAULT_TRIES.get(str(retries.get("mode", "standard")))


class SqsTransport:
    """A boto3 SQS client called from anyio worker threads, at most ``limit`` at a time.

    boto3 is blocking, so every call runs in a worker thread through one
    :class:`anyio.CapacityLimiter` (``max_in_flight_requests``): the backend works the same on
    asyncio and trio, and a burst cannot exhaust the default thread pool.  Errors are mapped to
    :class:`~blamequeue.errors.QueueError` here, inside the thread.
    """

    def __init__(self, client: Any, *, limit: int, where: str) -> None:
        self.client = client
        self._where = where
        # A limiter belongs to the event loop that made it: made by the backend's open().
        self.limiter = anyio.CapacityLimiter(limit)

    def call_sync(self, action: str, **params: Any) -> dict[str, Any]:
        """Call SQS ``action`` (``"ReceiveMessage"``) in this thread; map its errors."""
        method = getattr(self.client, method_name(action))
        try:
            response = method(**params)
        except Exception as exc:
            raise map_error(exc, where=self._where, action=action) from exc
        return response if isinstance(response, dict) else {}

    async def call(self, action: str, **params: Any) -> dict[str, Any]:
        """Call SQS ``action`` in a worker thread.  Cancellation waits for the request to end
        (it is short), so a request is never left half-known."""
        return await anyio.to_thread.run_sync(
            functools.partial(self.call_sync, action, **params), limiter=self.limiter
        )

    def batch_sync(
        self, action: str, url: str, entries: Sequence[Mapping[str, Any]]
    ) -> tuple[set[int], dict[int, dict[str, Any]]]:
        """Run a receipt batch action (``DeleteMessageBatch``,
        ``ChangeMessageVisibilityBatch``) over ``entries``, 10 per call, in this thread.

        Entry ``n`` goes with ``Id`` ``"n"``.  Returns the positions SQS applied and its
        failures (``Code``, ``Message``, ``SenderFault``) by position.
        """
        applied: set[int] = set()
        failed: dict[int, dict[str, Any]] = {}
        for start in range(0, len(entries), MAX_BATCH_ENTRIES):
            chunk = entries[start : start + MAX_BATCH_ENTRIES]
            response = self.call_sync(
                action,
                QueueUrl=url,
                Entries=[{**entry, "Id": str(start + n)} for n, entry in enumerate(chunk)],
            )
            applied.update(int(item["Id"]) for item in response.get("Successful", []))
            failed.update({int(item["Id"]): item for item in response.get("Failed", [])})
        return applied, failed

    async def batch(
        self, action: str, url: str, entries: Sequence[Mapping[str, Any]]
    ) -> tuple[set[int], dict[int, dict[str, Any]]]:
        """:meth:`batch_sync` in a worker thread."""
        return await self.run(functools.partial(self.batch_sync, action, url, entries))

    async def run(self, work: Callable[[], T], *, abandon_on_cancel: bool = False) -> T:
        """Run blocking ``work`` (which calls :meth:`call_sync`) in a worker thread."""
        return await anyio.to_thread.run_sync(
            work, abandon_on_cancel=abandon_on_cancel, limiter=self.limiter
        )

    def show_again_sync(self, url: str, receipts: Sequence[str]) -> int:
        """Make received messages visible again at once (visibility 0), in this thread;
        returns how many SQS accepted."""
        entries = [{"ReceiptHandle": receipt, "VisibilityTimeout": 0} for receipt in receipts]
        applied, _failed = self.batch_sync("ChangeMessageVisibilityBatch", url, entries)
        return len(applied)

    async def show_again(self, url: str, receipts: Sequence[str]) -> int:
        """:meth:`show_again_sync` in a worker thread."""
        return await self.run(functools.partial(self.show_again_sync, url, receipts))

    async def delete(self, url: str, receipts: Sequence[str]) -> int:
        """Delete received messages by receipt; returns how many SQS accepted."""
        entries = [{"ReceiptHandle": receipt} for receipt in receipts]
        applied, _failed = await self.batch("DeleteMessageBatch", url, entries)
        return len(applied)

    async def count(self, url: str, names: Sequence[str]) -> int:
        """The sum of the queue's approximate message counts ``names`` (GetQueueAttributes)."""
        response = await self.call("GetQueueAttributes", QueueUrl=url, AttributeNames=list(names))
        attributes = response.get("Attributes", {})
        return sum(int(attributes.get(name, 0)) for name in names)

    async def send_batch(
        self, url: str, chunk: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]]]:
        """One SendMessageBatch of ``chunk`` (entries with their ``Id``, see
        :func:`~blamequeue_sqs._messages.chunk_entries`): the entries SQS stored, and those it
        refused with its failure (``Code``, ``Message``, ``SenderFault``)."""
        response = await self.call("SendMessageBatch", QueueUrl=url, Entries=list(chunk))
        by_id = {entry["Id"]: entry for entry in chunk}
        sent = [by_id[item["Id"]] for item in response.get("Successful", [])]
        failed = [(by_id[item["Id"]], item) for item in response.get("Failed", [])]
        return sent, failed

    async def move(
        self, source_url: str, moves: Sequence[tuple[str, str, dict[str, Any]]]
    ) -> set[str]:
        """Send each entry of ``moves`` (receipt, target URL, entry) to its target queue, then
        delete the original message (by receipt) from ``source_url``.  Returns the receipts
        moved.  Not atomic: a crash between the two leaves both (at least once)."""
        moved: list[str] = []
        problems: list[str] = []
        for target, items in group_by(moves, lambda move: move[1]).items():
            entries = [
                {**entry, "Id": str(n)} for n, (_receipt, _target, entry) in enumerate(items)
            ]
            receipts = {str(n): receipt for n, (receipt, _target, _entry) in enumerate(items)}
            for chunk in chunk_entries(entries, DEFAULT_MAX_MESSAGE_BYTES):
                sent, failed = await self.send_batch(target, chunk)
                moved += [receipts[entry["Id"]] for entry in sent]
                problems += [entry_failure(failure) for _entry, failure in failed]
        if moved:
            _deleted, not_deleted = await self.batch(
                "DeleteMessageBatch", source_url, [{"ReceiptHandle": r} for r in moved]
            )
            for failure in not_deleted.values():
                log.warning(
                    "%s: moved a message but could not delete the original (%s); it may be "
                    "delivered again",
                    self._where,
                    failure.get("Code"),
                )
        if problems:
            raise BackendUnavailableError(
                f"{self._where}: SQS refused to take {len(problems)} message(s): "
                f"{'; '.join(problems[:3])}"
            )
        return set(moved)


Connection = StoreGuard[SqsTransport]
"""The backend's transport while it is open (``handle``, ``None`` before ``open`` and after
``close``; ``require()`` refuses then): every part of the backend reaches SQS through the one
connection it shares.  ``where`` is how messages name the backend: ``sqs backend 'name'``.
The transport maps SQS errors itself (:func:`~blamequeue_sqs._sqs_errors.map_error`, which
needs the action), so the connection has no ``map_error``."""


class CountingClient:
    """Wraps a boto3 SQS client and counts the requests made through it, per action.

    Pass it as the backend's ``client`` option to see what a workload costs::

        import boto3
        from blamequeue_sqs import CountingClient

        client = CountingClient(boto3.client("sqs"))
        queue = Queue(backends={"sqs": {"protocol": "sqs", "queue_url": URL, "client": client}})
        ...
        print(client.total, dict(client.requests))   # e.g. 301 {'SendMessageBatch': 100, ...}

    ``blamequeue bench --backend sqs`` uses it to report SQS requests per job.  Thread-safe;
    the wrapped client is never closed by the backend (it is the caller's).
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        actions = getattr(getattr(client, "meta", None), "method_to_api_mapping", None)
        self._actions: Mapping[str, str] = actions if isinstance(actions, Mapping) else {}

    @property
    def total(self) -> int:
        """Requests made so far, all actions together."""
        with self._lock:
            return sum(self.requests.values())

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.requests)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or not callable(attribute) or name in ("close", "can_paginate"):
            return attribute
        action = self._actions.get(name, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.requests[action] += 1
            return attribute(*args, **kwargs)

        return counted
