"""Settling: what becomes of the leases this process handed out.

:class:`Settler` owns the leases held here (by receipt handle, the lease token) and carries
out each outcome with the SQS batch call that does it:

* ``done``: DeleteMessageBatch;
* ``retry``: ChangeMessageVisibilityBatch to the backoff delay;
* ``dead``: ChangeMessageVisibilityBatch (the fence), SendMessageBatch of the dead-letter copy
  (the sealed last error in ``bq-last-error``) to the dead-letter queue, DeleteMessageBatch;
* ``release``: the same fence and move, of a fresh copy back to the queue carrying the attempts
  made before, delayed to the settlement's time (FIFO: ChangeMessageVisibilityBatch to that
  time, keeping the order and spending the attempt);
* extending a lease: ChangeMessageVisibilityBatch.

SQS refuses a receipt handle whose message was deleted or received again (``stale``): that is
the fence.  Settled tokens and completed job ids are remembered (:mod:`._memo`), so a settle
the core retries after a partial failure returns the same answers, and a later copy of a
completed job is recognised (:meth:`Settler.is_done`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from blamequeue.abc import Settlement, StoredJob, check_settlements
from blamequeue.errors import BackendUnavailableError
from blamequeue_sqs import _messages as messages
from blamequeue_sqs._memo import Memo
from blamequeue_sqs._messages import Decoded, ceil_seconds, dead_entry, fresh_entry
from blamequeue_sqs._options import SqsOptions
from blamequeue_sqs._routing import Route, Router
from blamequeue_sqs._sqs_errors import is_stale
from blamequeue_sqs._transport import Connection, group_by

__all__ = ["MOVE_VISIBILITY", "Held", "Settler"]

MOVE_VISIBILITY: Final = 60
"""How long a message stays hidden while the backend moves it (fence, send the copy, delete)."""


@attrs.define(eq=False)
class Held:
    """A lease this process handed out: what settling it needs (SQS wants the queue URL, and
    moving a message to the dead-letter queue needs its body)."""

    route: Route
    token: str
    job: StoredJob
    decoded: Decoded
    received_at: float
    lost: bool = False


# An item of a batch action: (index in the caller's list, the lease, extra entry fields).
_Item = tuple[int, Held, dict[str, Any]]
# A move: (index, the lease, target queue URL, the entry to send there).
_Move = tuple[int, Held, str, dict[str, Any]]


@attrs.define(eq=False)
class Settler:
    """The leases held here, and settling and extending them."""

    _config: SqsOptions
    _connection: Connection
    _router: Router
    # By token: the leases handed out and not settled yet.
    _held: dict[str, Held] = attrs.field(init=False, factory=dict)
    # Tokens settled, and whether the settlement was applied (a retried settle answers again).
    _settled: Memo[bool] = attrs.field(init=False, factory=Memo)
    # Job ids this process completed: a later message of one is a copy (a send whose
    # answer was lost, stored twice), deleted on receipt instead of run again.
    _done: Memo[None] = attrs.field(init=False, factory=Memo)

    def hold(self, held: Held) -> None:
        """Record a lease handed out."""
        self._held[held.token] = held

    def is_done(self, job_id: str) -> bool:
        """Whether this process completed ``job_id`` (recently)."""
        return job_id in self._done

    def lose(self, route: Route) -> None:
        """The messages of ``route`` are gone (purged): their leases can no longer settle."""
        for held in self._held.values():
            if held.route is route:
                held.lost = True

    def drop_stale(self, now: float) -> None:
        """Forget leases no receipt can still hold (SQS keeps one 12 h at most)."""
        for token, held in list(self._held.items()):
            if now - held.received_at > messages.MAX_VISIBILITY_SECONDS + MOVE_VISIBILITY:
                del self._held[token]  # never settled, now stale

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        if not settlements:
            return []
        self._connection.require()
        message_group = self._config.message_group
        results: list[bool | None] = [None] * len(settlements)
        deletes: list[tuple[int, Held]] = []
        changes: list[tuple[int, Held, int]] = []
        moves: list[_Move] = []
        firsts = check_settlements(settlements)
        for index, (item, first) in enumerate(zip(settlements, firsts, strict=True)):
            if not first:
                results[index] = False  # a repeated settlement is stale: applied once
                continue
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
                longest = messages.receipt_seconds_left(held.received_at, now)
                changes.append((index, held, min(ceil_seconds(item.at - now), longest)))
            elif item.outcome == "release" and route.fifo:
                # FIFO: keep the order, spend the attempt; hidden until due (RetryLater).
                longest = messages.receipt_seconds_left(held.received_at, now)
                changes.append((index, held, min(max(0, ceil_seconds(item.at - now)), longest)))
            elif item.outcome == "release":
                entry = fresh_entry(
                    held.decoded,
                    attempts_before=held.job.attempts - 1,
                    fifo=route.fifo,
                    message_group=message_group,
                )
                # Due at the settlement's time (now, or later for RetryLater).
                delay = max(0, ceil_seconds(item.at - now))
                entry = messages.delay_entry(entry, delay=delay, due=item.at)
                moves.append((index, held, route.url, entry))
            else:
                dlq = self._router.require_dlq(route)
                entry = dead_entry(
                    held.decoded,
                    attempts=held.job.attempts,
                    at=item.at,
                    error=item.error,
                    fifo=route.fifo,
                    message_group=message_group,
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
                    self._done.remember(held.job.id, None)
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
                f"{self._connection.where}: SQS failed {len(problems)} settlement(s) "
                f"({'; '.join(problems[:3])}); the others were applied"
            )
        return [bool(result) for result in results]

    async def extend(
        self, leases: Sequence[tuple[str, str]], *, expires_at: float, now: float
    ) -> list[bool]:
        if not leases:
            return []
        self._connection.require()
        results: list[bool | None] = [None] * len(leases)
        items: list[_Item] = []
        capped: set[int] = set()
        for index, (job_id, token) in enumerate(leases):
            held = self._held.get(token)
            if held is None or held.job.id != job_id or held.lost:
                results[index] = False
                continue
            seconds = max(1, ceil_seconds(expires_at - now))
            longest = messages.receipt_seconds_left(held.received_at, now)
            if seconds > longest:
                seconds = longest  # SQS holds one receipt for 12 h at most
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
                f"{self._connection.where}: SQS failed to extend {len(problems)} lease(s): "
                f"{'; '.join(problems[:3])}"
            )
        return [bool(result) for result in results]

    def _forget(self, held: Held, applied: bool) -> bool:
        self._held.pop(held.token, None)
        self._settled.remember(held.token, applied)
        return applied

    async def _apply(
        self,
        action: str,
        items: Sequence[_Item],
        results: list[bool | None],
        problems: list[str],
        *,
        forget: bool = True,
    ) -> list[int]:
        """Run a batch action on the receipts of ``items`` (grouped by queue, 10 per call) and
        record each outcome; returns the indexes it applied."""
        transport = self._connection.require()
        applied: list[int] = []
        for url, group in group_by(items, lambda item: item[1].route.url).items():
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
        self, moves: Sequence[_Move], results: list[bool | None], problems: list[str]
    ) -> None:
        # Fence first: only a receipt that still owns its message is moved, so a lost lease
        # never puts a copy in the dead-letter queue.
        fenced = set(
            await self._apply(
                "ChangeMessageVisibilityBatch",
                [
                    (index, held, {"VisibilityTimeout": MOVE_VISIBILITY})
                    for index, held, _t, _e in moves
                ],
                results,
                problems,
                forget=False,
            )
        )
        transport = self._connection.require()
        mine = [move for move in moves if move[0] in fenced]
        for url, group in group_by(mine, lambda move: move[1].route.url).items():
            try:
                moved = await transport.move(
                    url, [(held.token, target, entry) for _index, held, target, entry in group]
                )
            except BackendUnavailableError as exc:
                problems.append(exc.message)
                moved = set()
            for index, held, _target, _entry in group:
                if held.token in moved:
                    results[index] = self._forget(held, True)
