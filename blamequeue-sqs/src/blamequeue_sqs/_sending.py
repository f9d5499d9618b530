"""Sending: enqueue as SendMessageBatch.

:class:`Sender` turns new jobs into SQS messages (:mod:`._messages`) and sends them 10 per
call, fewer when their sizes add up to the queue's MaximumMessageSize.  Everything is checked
before anything is sent: what SQS cannot do (priorities, flows, a delay on a FIFO queue) and a
message over the queue's size limit.  A delay up to 900 s is DelaySeconds; a longer one sends a
*placeholder* (DelaySeconds 900, the due time in ``bq-park-until``) that leases re-park until
it is due (:mod:`._receiving`).

SQS has no atomic batch: job ids sent are remembered (:mod:`._memo`), so the core's retry of a
call cut short sends only the rest, and an error says which jobs of the list were stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from blamequeue.abc import NewJob
from blamequeue.errors import (
    BackendUnavailableError,
    BadArgumentError,
    QueueError,
    UnsupportedError,
)
from blamequeue_sqs import _messages as messages
from blamequeue_sqs._memo import Memo
from blamequeue_sqs._messages import (
    ATTR_JOB_ID,
    body_of,
    ceil_seconds,
    chunk_entries,
    encode_body,
    entry_size,
    group_id,
    job_attributes,
)
from blamequeue_sqs._options import SqsOptions
from blamequeue_sqs._routing import Route, Router
from blamequeue_sqs._sqs_errors import entry_failure
from blamequeue_sqs._transport import Connection

__all__ = ["Sender"]


def _spans(indexes: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2, 5"`` (sorted indexes)."""
    spans: list[list[int]] = []
    for index in indexes:
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _job_id(entry: dict[str, Any]) -> str:
    return str(entry["MessageAttributes"][ATTR_JOB_ID]["StringValue"])


@attrs.define(eq=False)
class Sender:
    """``enqueue``: new jobs as SQS messages, sent in batches."""

    _config: SqsOptions
    _connection: Connection
    _router: Router
    # Told of every SQS queue a message is about to be sent to (the receiver's long polls).
    _on_send: Callable[[Route], None] = attrs.field(kw_only=True)
    # Job ids sent: a retried enqueue sends only the others.
    _sent: Memo[None] = attrs.field(init=False, factory=Memo)

    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        if not jobs:
            return
        transport = self._connection.require()
        where = self._connection.where
        routes: dict[str, Route] = {}
        for queue in dict.fromkeys(job.queue for job in jobs):
            routes[queue] = await self._router.require(queue)
        # Everything is checked before anything is sent.
        planned: dict[str, tuple[Route, list[dict[str, Any]]]] = {}
        for index, job in enumerate(jobs):
            route = routes[job.queue]
            entry = self._entry(route, job, index)
            size = entry_size(entry)
            if size > route.max_message_size:
                raise BadArgumentError(
                    "queue/bad-payload",
                    f"{where}: job {index} is {size} bytes as an SQS message, over the "
                    f"queue's limit of {route.max_message_size} bytes; nothing was sent. Keep "
                    f"large payloads elsewhere (S3) and enqueue a reference",
                )
            if job.id in self._sent:
                continue  # sent by an earlier try of this same call
            planned.setdefault(route.url, (route, []))[1].append(entry)
            self._on_send(route)
        failed: list[tuple[str, str]] = []
        retryable = True
        try:
            for route, entries in planned.values():
                for chunk in chunk_entries(entries, route.max_message_size):
                    sent, refused = await transport.send_batch(route.url, chunk)
                    for entry in sent:
                        self._sent.remember(_job_id(entry), None)
                    for entry, failure in refused:
                        failed.append((_job_id(entry), entry_failure(failure)))
                        retryable = retryable and not failure.get("SenderFault", False)
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
                f"{where}: SQS refused {len(failed)} of {len(jobs)} job(s) ({detail}); "
                f"the others were stored and will run (SQS has no atomic batch): enqueue only "
                f"the refused ones again",
                retryable=retryable,
            )

    def _entry(self, route: Route, job: NewJob, index: int) -> dict[str, Any]:
        where = self._connection.where
        if job.priority != 0:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{where}: SQS has no priorities; leave priority at 0 (got {job.priority})",
            )
        if job.parked or job.depends_on:
            raise UnsupportedError(
                "queue/flow-unsupported",
                f"{where}: SQS cannot park flow children until their dependencies are "
                f"done; run flows on a backend with flows (e.g. 'local')",
            )
        delay = ceil_seconds(job.available_at - job.created_at)
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": encode_body(body_of(job))}
        entry["MessageAttributes"] = job_attributes(job.id)
        if route.fifo:
            if delay > 0:
                raise BadArgumentError(
                    "queue/bad-argument",
                    f"{where}: SQS FIFO queues cannot delay single messages; enqueue "
                    f"with delay=0, or use a standard queue",
                )
            entry["MessageGroupId"] = group_id(job.queue, job.id, self._config.message_group)
            entry["MessageDeduplicationId"] = job.id
            return entry
        # Longer than SQS can delay: a placeholder, re-parked until due (see _receiving).
        return messages.delay_entry(entry, delay=delay, due=job.available_at)
