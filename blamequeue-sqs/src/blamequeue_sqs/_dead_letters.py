"""Dead letters: reading and operating a queue's dead-letter queue.

SQS has no query over a queue, so :class:`DeadLetters` reads a dead-letter queue with
receives (:meth:`DeadLetters.scan`: the messages hidden 30 s while it reads) and then shows
what it read again (ChangeMessageVisibilityBatch to 0) or deletes it (DeleteMessageBatch):

* ``dlq_list``: the dead letters of one queue name's SQS queue, newest first;
* ``dlq_size``: GetQueueAttributes on the dead-letter queue;
* ``dlq_purge``: deletes the dead letters of the queue's jobs, shows the others again;
* ``dlq_retry``: finds a job by its ``bq-job-id`` attribute in the dead-letter queues this
  process knows and sends a fresh message of it to its queue (attempts reset).

Moving a job *to* the dead-letter queue is the settling's (``dead``) and the lease's (a job
whose worker died during its last attempt); both send the copy :func:`._messages.dead_entry`
builds, with the sealed last error in the ``bq-last-error`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import anyio
import attrs

from blamequeue.abc import StoredJob
from blamequeue_sqs._messages import (
    ATTR_JOB_ID,
    MAX_BATCH_ENTRIES,
    Decoded,
    attempts_of,
    decode,
    fresh_entry,
    receive_request,
    stored_job,
)
from blamequeue_sqs._options import SqsOptions
from blamequeue_sqs._routing import Route, Router
from blamequeue_sqs._transport import Connection

__all__ = ["DeadLetters"]

# How long dead letters stay hidden while a dlq_* call scans them (they are shown again after).
_SCAN_VISIBILITY: Final = 30


def _receipts(found: Sequence[dict[str, Any]]) -> list[str]:
    return [message["ReceiptHandle"] for message in found]


@attrs.define(eq=False)
class DeadLetters:
    """``dlq_list``, ``dlq_size``, ``dlq_purge`` and ``dlq_retry`` over SQS dead-letter
    queues."""

    _config: SqsOptions
    _connection: Connection
    _router: Router

    async def jobs(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        target = await self._target(queue)
        if target is None:
            return []
        route, dlq_url = target
        found = await self._scan(dlq_url)
        try:
            jobs = []
            for message in found:
                decoded = decode(message)
                if decoded is not None and self._router.belongs(decoded, route):
                    jobs.append(_dead_letter(route, decoded))
        finally:
            with anyio.CancelScope(shield=True):
                await self._connection.require().show_again(dlq_url, _receipts(found))
        jobs.sort(key=lambda job: (job.finished_at or 0.0, job.id), reverse=True)
        return jobs if limit is None else jobs[: max(0, limit)]

    async def size(self, queue: str) -> int:
        target = await self._target(queue)
        if target is None:
            return 0
        return await self._connection.require().count(
            target[1], ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
        )

    async def purge(self, queue: str) -> int:
        target = await self._target(queue)
        if target is None:
            return 0
        route, dlq_url = target
        found = await self._scan(dlq_url)
        mine = [m for m in found if self._router.belongs(decode(m), route)]
        others = [m for m in found if not self._router.belongs(decode(m), route)]
        transport = self._connection.require()
        with anyio.CancelScope(shield=True):
            if others:
                await transport.show_again(dlq_url, _receipts(others))
            deleted = await transport.delete(dlq_url, _receipts(mine))
        return deleted

    async def retry(self, job_id: str) -> StoredJob | None:
        transport = self._connection.require()
        # The dead-letter queues this process knows: those of the configured queues and of
        # the templated ones it used.
        dlqs: dict[str, Route] = {}
        for route in self._router.known():
            if route.dlq_url is not None:
                dlqs.setdefault(route.dlq_url, route)

        def wanted(message: dict[str, Any]) -> bool:
            attribute = message.get("MessageAttributes", {}).get(ATTR_JOB_ID, {})
            return bool(attribute.get("StringValue") == job_id)

        for dlq_url, route in dlqs.items():
            found = await self._scan(dlq_url, stop=wanted)
            match = next((m for m in found if wanted(m) and decode(m) is not None), None)
            hidden = list(found)
            try:
                if match is None:
                    continue
                decoded = decode(match)
                assert decoded is not None
                source = await self._router.route(decoded.queue, create=self._config.create_queues)
                if source is None:
                    source = route
                job = _dead_letter(source, decoded)
                entry = fresh_entry(
                    decoded,
                    attempts_before=0,
                    fifo=source.fifo,
                    message_group=self._config.message_group,
                )
                await transport.call("SendMessage", QueueUrl=source.url, **entry)
                hidden.remove(match)
                with anyio.CancelScope(shield=True):
                    await transport.delete(dlq_url, _receipts([match]))
                return job
            finally:
                if hidden:
                    with anyio.CancelScope(shield=True):
                        await transport.show_again(dlq_url, _receipts(hidden))
        return None

    async def _target(self, queue: str) -> tuple[Route, str] | None:
        """The SQS queue of ``queue`` and its dead-letter queue; ``None`` when the queue does
        not exist (templated URLs only)."""
        self._connection.require()
        route = await self._router.route(queue, create=False)
        if route is None:
            return None
        return route, self._router.require_dlq(route)

    async def _scan(
        self, dlq_url: str, *, stop: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        """Receive the visible messages of a dead-letter queue, hidden while scanning; the
        caller shows them again (or deletes them)."""
        transport = self._connection.require()
        params = receive_request(
            dlq_url,
            want=MAX_BATCH_ENTRIES,
            visibility=_SCAN_VISIBILITY,
            wait=self._config.dlq_scan_wait,
        )
        found: dict[str, dict[str, Any]] = {}
        while True:
            response = await transport.call("ReceiveMessage", **params)
            batch = [m for m in response.get("Messages", []) if m["MessageId"] not in found]
            if not batch:
                return list(found.values())
            for message in batch:
                found[message["MessageId"]] = message
            if stop is not None and any(stop(message) for message in batch):
                return list(found.values())


def _dead_letter(route: Route, decoded: Decoded) -> StoredJob:
    """The dead job a dead-letter message holds."""
    body = decoded.body
    attempts = body.get("attempts")
    if not isinstance(attempts, int):
        # Moved by the RedrivePolicy, not by blamequeue: it was received maxReceiveCount
        # times.
        attempts = attempts_of(decoded, route.max_receive_count)
    failed_at = body.get("failed_at")
    return stored_job(
        decoded,
        state="dead",
        attempts=attempts,
        last_error=decoded.last_error,
        finished_at=float(failed_at) if isinstance(failed_at, int | float) else decoded.sent_at,
    )
