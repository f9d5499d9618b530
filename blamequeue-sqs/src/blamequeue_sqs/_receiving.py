"""Receiving: leases are ReceiveMessage batches.

:class:`Receiver` owns leasing:

* **lease**: the messages waiting in the :class:`~blamequeue_sqs._inbox.Inbox`, then
  ReceiveMessage (up to 10 per call, several calls for a larger batch) with the lease, rounded
  up to whole seconds, as VisibilityTimeout; each job handed out is recorded with the
  :class:`~blamequeue_sqs._settling.Settler` (the receipt handle is the lease token);
* **long polling** (:meth:`Receiver.wait_for_work`): a ReceiveMessage with WaitTimeSeconds
  whose messages wait in the inbox for the next lease; after a poll that found nothing the
  next lease does not ask again;
* **messages a lease must not hand out** (:class:`Chores`): copies of a job done or handed out
  here (DeleteMessageBatch), placeholders of a job delayed beyond SQS's 900 s (re-parked:
  ChangeMessageVisibilityBatch, or sent as the real message once due within 900 s), jobs out
  of attempts whose worker died (moved to the dead-letter queue with the sweep's ``lease
  expired`` error, reported by the next sweep) and messages blamequeue did not write (moved to
  the dead-letter queue as they are).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import anyio
import attrs

from blamequeue._job_logging import jobs_extra
from blamequeue.abc import Clock, Lease, StoredJob
from blamequeue.errors import QueueError
from blamequeue_sqs import _messages as messages
from blamequeue_sqs._inbox import Inbox, Received
from blamequeue_sqs._messages import (
    MAX_BATCH_ENTRIES,
    Decoded,
    attempts_of,
    ceil_seconds,
    dead_entry,
    decode,
    encode_body,
    job_attributes,
    resend_fields,
    stored_job,
)
from blamequeue_sqs._options import MAX_WAIT_SECONDS, SqsOptions
from blamequeue_sqs._routing import Route, Router
from blamequeue_sqs._settling import MOVE_VISIBILITY, Held, Settler
from blamequeue_sqs._transport import Connection, group_by

__all__ = ["Chores", "Receiver"]

log = logging.getLogger("blamequeue.sqs")

# The idle long poll asks for this lease when no lease call told it better.
_DEFAULT_VISIBILITY: Final = 30


@attrs.define(eq=False)
class Chores:
    """Messages a lease received but must not hand out."""

    foreign: list[Received] = attrs.field(factory=list)
    parked: list[tuple[Received, Decoded]] = attrs.field(factory=list)
    exhausted: list[tuple[Received, Decoded]] = attrs.field(factory=list)
    copies: list[Received] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.foreign or self.parked or self.exhausted or self.copies)

    def log_extra(self) -> dict[str, Any]:
        """The log fields of the jobs among them (a foreign message is no job)."""
        jobs = [decoded for _item, decoded in (*self.parked, *self.exhausted)]
        jobs += [found for item in self.copies if (found := decode(item.message)) is not None]
        return jobs_extra(None, [job.job_id for job in jobs], [job.queue for job in jobs])


@attrs.define(eq=False)
class Receiver:
    """Leases, long polling, and what a lease must not hand out."""

    _config: SqsOptions
    _connection: Connection
    _router: Router
    _settler: Settler
    _inbox: Inbox
    _clock: Clock = attrs.field(kw_only=True)
    # By queue name: the visibility and count the last lease asked for (the long poll's).
    _asked: dict[str, tuple[int, int]] = attrs.field(init=False, factory=dict)
    # Long polls (wait_for_work) run on after their waiter is cancelled, so a same-process
    # enqueue wakes a consumer at once: per queue URL, set once the last one returned.
    _polls: dict[str, anyio.Event] = attrs.field(init=False, factory=dict)
    # Queue URLs whose last long poll waited its full time and found nothing: the lease
    # right after it need not ask SQS again (an idle consumer costs one request a wait).
    _quiet: set[str] = attrs.field(init=False, factory=set)
    # The last error of a job whose last lease expired (the sweep tells it), and the jobs
    # leases dead-lettered since the last sweep.
    _expired_error: str | None = attrs.field(init=False, default=None)
    _dead_at_lease: list[StoredJob] = attrs.field(init=False, factory=list)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Forget the long polls (their events belong to the event loop that is closing)."""
        self._polls.clear()

    # -- what other parts tell it ----------------------------------------------------------
    def expect(self, route: Route) -> None:
        """A message is being sent to ``route``: the next lease asks SQS again."""
        self._quiet.discard(route.url)

    def swept(self, expired_error: str) -> list[StoredJob]:
        """The jobs leases dead-lettered since the last sweep (their attempts were exhausted:
        the worker died); later ones get ``expired_error`` as their last error."""
        self._expired_error = expired_error
        dead, self._dead_at_lease = self._dead_at_lease, []
        return dead

    # -- leasing ---------------------------------------------------------------------------
    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        self._connection.require()
        if limit <= 0:
            return []
        route = await self._router.require(queue)
        visibility = min(max(1, ceil_seconds(lease_seconds)), messages.MAX_VISIBILITY_SECONDS)
        expires_at = now + min(lease_seconds, messages.MAX_VISIBILITY_SECONDS)
        self._asked[queue] = (visibility, limit)
        leases: list[Lease] = []
        chores = Chores()
        received = self._inbox.take(route, limit, now)
        self._classify(received, leases, chores)
        # Copies are deleted, not handed out: they leave room for more.
        count = len(received) - len(chores.copies)
        if route.url in self._quiet:
            self._quiet.discard(route.url)
            if not received:
                return []
        while count < limit:
            want = min(MAX_BATCH_ENTRIES, limit - count)
            batch = await self._inbox.receive(
                route,
                want=want,
                visibility=visibility,
                wait=0,
                received_at=now,
                expires_at=expires_at,
            )
            copies = len(chores.copies)
            self._classify(batch, leases, chores)
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
                    self._connection.where,
                    exc,
                    extra=chores.log_extra(),
                )
        leases.sort(key=lambda lease: lease.job.id)
        return leases

    def _classify(self, received: Sequence[Received], leases: list[Lease], chores: Chores) -> None:
        handed = {lease.job.id for lease in leases}
        for item in received:
            decoded = decode(item.message)
            if decoded is None:
                chores.foreign.append(item)
                continue
            if self._settler.is_done(decoded.job_id) or decoded.job_id in handed:
                # A copy of a job done here, or of one this lease hands out already: SQS
                # stored a send twice.  (Not checked against leases held from earlier calls: a
                # release re-sends its job while the old lease is still held.)
                chores.copies.append(item)
                continue
            if decoded.park_until is not None:
                chores.parked.append((item, decoded))
                continue
            attempts = attempts_of(decoded)
            job = stored_job(decoded, state="inflight", attempts=attempts)
            if attempts > job.max_attempts:
                # Its last attempt's lease expired (the worker died): dead, like the sweep of
                # a store-kept lease would do.
                chores.exhausted.append((item, decoded))
                continue
            token = item.receipt
            self._settler.hold(
                Held(
                    route=item.route,
                    token=token,
                    job=job,
                    decoded=decoded,
                    received_at=item.received_at,
                )
            )
            leases.append(Lease(job=job, token=token, expires_at=item.expires_at))
            handed.add(job.id)

    async def _do_chores(self, route: Route, chores: Chores, now: float) -> None:
        transport = self._connection.require()
        where = self._connection.where
        for url, copies in group_by(chores.copies, lambda item: item.route.url).items():
            log.info(
                "%s: deleting %d extra cop(ies) of jobs done or running here (a send SQS "
                "stored twice)",
                where,
                len(copies),
            )
            await transport.delete(url, [copy.receipt for copy in copies])
        moves: list[tuple[str, str, dict[str, Any]]] = []  # (receipt, target url, entry)
        for item in chores.foreign:
            dlq = route.dlq_url
            if dlq is None:
                log.warning("%s: a message on %s is not a blamequeue job", where, route.url)
                continue
            entry: dict[str, Any] = {"MessageBody": item.message.get("Body", "")}
            if item.message.get("MessageAttributes"):
                entry["MessageAttributes"] = item.message["MessageAttributes"]
            fields = resend_fields(
                entry, None, fifo=route.fifo, message_group=self._config.message_group
            )
            moves.append((item.receipt, dlq, fields))
        dead: dict[str, StoredJob] = {}
        for item, decoded in chores.exhausted:
            dlq = route.dlq_url
            if dlq is None:
                continue  # the RedrivePolicy backstop has it when there is one
            attempts = attempts_of(decoded) - 1
            error = self._expired_error
            entry = dead_entry(
                decoded,
                attempts=attempts,
                at=now,
                error=error,
                fifo=route.fifo,
                message_group=self._config.message_group,
            )
            moves.append((item.receipt, dlq, entry))
            dead[item.receipt] = stored_job(
                decoded, state="dead", attempts=attempts, last_error=error, finished_at=now
            )
        changes: list[tuple[str, int]] = []
        for item, decoded in chores.parked:
            assert decoded.park_until is not None
            remaining = decoded.park_until - now
            if remaining <= messages.MAX_DELAY_SECONDS:
                entry = {
                    "MessageBody": encode_body(dict(decoded.body)),
                    "MessageAttributes": job_attributes(decoded.job_id),
                    "DelaySeconds": ceil_seconds(remaining),
                }
                moves.append((item.receipt, route.url, entry))
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
                moves.append((item.receipt, route.url, entry))
            else:
                hide = min(
                    ceil_seconds(remaining) - messages.MAX_DELAY_SECONDS,
                    messages.MAX_VISIBILITY_SECONDS - MOVE_VISIBILITY,
                )
                changes.append((item.receipt, max(1, hide)))
        if changes:
            await transport.batch(
                "ChangeMessageVisibilityBatch",
                route.url,
                [{"ReceiptHandle": r, "VisibilityTimeout": seconds} for r, seconds in changes],
            )
        if moves:
            moved = await transport.move(route.url, moves)
            self._dead_at_lease += [job for receipt, job in dead.items() if receipt in moved]

    # -- long polling ----------------------------------------------------------------------
    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        """Long polling: a ReceiveMessage that waits up to ``timeout`` (at most 20 s) for a
        message from any process; what it receives waits in the stash for the next lease."""
        wait = min(MAX_WAIT_SECONDS, int(timeout)) if timeout >= 1 else 0
        route = None
        if wait >= 1 and self._connection.is_open:
            route = await self._router.route(queue, create=False)
        if route is None:
            await anyio.sleep(max(0.0, timeout))
            return
        with anyio.move_on_after(max(0.0, timeout)):
            earlier = self._polls.get(route.url)
            if earlier is not None:
                # A long poll whose waiter was cancelled may still listen: wait for it rather
                # than ask twice; what it receives lands in the stash.
                await earlier.wait()
            if self._inbox.holds(route):
                return
            visibility, limit = self._asked.get(queue, (_DEFAULT_VISIBILITY, MAX_BATCH_ENTRIES))
            now = self._clock.now()
            done = self._polls[route.url] = anyio.Event()
            got = await self._inbox.receive(
                route,
                want=min(MAX_BATCH_ENTRIES, limit),
                visibility=visibility,
                wait=wait,
                received_at=now,
                expires_at=now + visibility,
                detach=done,  # a same-process enqueue ends the wait at once
            )
            if got:
                self._inbox.stash(got)
            else:  # the whole wait passed without a message
                self._quiet.add(route.url)
