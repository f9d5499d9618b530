"""The inbox: messages received from SQS and not handed out yet, and the receives that get them.

A ReceiveMessage runs in a worker thread.  Its caller may be cancelled while it runs, and an
idle long poll is left to run on after its waiter is cancelled (so a same-process enqueue wakes
a consumer at once): whatever such a receive gets lands in :class:`Inbox`'s stash, per queue,
and the next lease hands it out.  A received message is never forgotten (it would stay hidden
for a whole lease, an attempt spent): when the backend closes, the stash is made visible again
(ChangeMessageVisibilityBatch to 0), and a receive still running then does the same with what
it gets; the last one of those closes the boto3 client.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Final

import anyio
import anyio.from_thread
import attrs

from blamequeue.errors import QueueError
from blamequeue_sqs._messages import receive_request
from blamequeue_sqs._routing import Route
from blamequeue_sqs._transport import Connection, SqsTransport, group_by

__all__ = ["Inbox", "Received", "close_client"]

log = logging.getLogger("blamequeue.sqs")

# A received message handed out with less than this left of its visibility could be
# received by someone else before its handler starts: it is left to come back instead.
_MIN_LEASE_LEFT: Final = 1.0


@attrs.define(eq=False)
class Received:
    """A message received and not yet handed out."""

    route: Route
    message: dict[str, Any]
    received_at: float
    expires_at: float

    @property
    def receipt(self) -> str:
        return str(self.message["ReceiptHandle"])


@attrs.define(eq=False)
class _Box:
    """Where a receive running in a worker thread leaves its messages.  If the awaiting task
    was cancelled, whoever finishes last puts them in the stash."""

    messages: list[Received] = attrs.field(factory=list)
    done: bool = False
    orphan: bool = False


def close_client(client: Any) -> None:
    """Close a boto3 client the backend made (best effort; blocking)."""
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # closing is best effort; the sockets go with the client
            log.debug("closing the boto3 client failed: %r", exc)


def _set_from_thread(event: anyio.Event) -> None:
    """Set ``event`` from the worker thread of a receive, if its event loop still runs."""
    try:
        anyio.from_thread.run_sync(event.set)
    except Exception as exc:  # the loop is gone: nobody waits any more
        log.debug("could not signal the end of a long poll: %r", exc)


@attrs.define(eq=False)
class Inbox:
    """Receives, and the stash of what was received but not handed out."""

    _connection: Connection
    # Guards the stash, the closed flag and the detached receives: worker threads use them.
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    # By queue URL: received, not handed out yet.
    _stash: dict[str, deque[Received]] = attrs.field(init=False, factory=dict)
    _closed: bool = attrs.field(init=False, default=False)
    # Receives running on in a worker thread after their caller was cancelled, and the
    # client the last of them closes (the backend closed meanwhile).
    _detached: int = attrs.field(init=False, default=0)
    _close_later: Any = attrs.field(init=False, default=None)

    def open(self) -> None:
        with self._lock:
            self._closed = False

    async def close(self) -> None:
        """Stop stashing; make the messages received but never handed out visible again now,
        not after a lease."""
        with self._lock:
            self._closed = True
            leftovers = [item for stash in self._stash.values() for item in stash]
            self._stash.clear()
        transport = self._connection.handle
        if transport is not None and leftovers:
            await transport.run(functools.partial(self._show_again_sync, transport, leftovers))

    def close_client_later(self, client: Any) -> bool:
        """Leave ``client`` to the last receive still running in a worker thread (its caller
        was cancelled) to close, after it shows its messages again; ``False`` when none runs
        (close it now)."""
        with self._lock:
            if not self._detached:
                return False
            self._close_later = client
            return True

    def stash(self, items: Sequence[Received]) -> None:
        """Keep ``items`` for the next lease (unless the backend closed)."""
        with self._lock:
            if not self._closed:
                self._stash_locked(items)

    def take(self, route: Route, limit: int, now: float) -> list[Received]:
        """Up to ``limit`` stashed messages of ``route`` with time left on their lease."""
        taken: list[Received] = []
        with self._lock:
            stash = self._stash.get(route.url)
            while stash and len(taken) < limit:
                item = stash.popleft()
                # One whose visibility is (nearly) over may already be someone else's.
                if item.expires_at - now >= _MIN_LEASE_LEFT:
                    taken.append(item)
        return taken

    def holds(self, route: Route) -> bool:
        """Whether messages of ``route`` wait in the stash."""
        with self._lock:
            return bool(self._stash.get(route.url))

    def drop(self, route: Route) -> None:
        """``route`` was purged: forget what was received from it."""
        with self._lock:
            self._stash.pop(route.url, None)

    def _stash_locked(self, items: Sequence[Received]) -> None:
        for item in items:
            self._stash.setdefault(item.route.url, deque()).append(item)

    def _show_again_sync(self, transport: SqsTransport, items: Sequence[Received]) -> None:
        for url, group in group_by(items, lambda item: item.route.url).items():
            try:
                transport.show_again_sync(url, [item.receipt for item in group])
            except QueueError as exc:
                log.warning("%s: could not release messages: %s", self._connection.where, exc)

    async def receive(
        self,
        route: Route,
        *,
        want: int,
        visibility: int,
        wait: int,
        received_at: float,
        expires_at: float,
        detach: anyio.Event | None = None,
    ) -> list[Received]:
        """Receive up to ``want`` messages.  With ``detach`` (an event set when the receive
        returns), a cancelled caller does not wait for it: the receive goes on in its thread
        and leaves what it got in the stash for the next lease."""
        transport = self._connection.require()
        box = _Box()
        params = receive_request(route.url, want=want, visibility=visibility, wait=wait)

        def receive() -> list[Received]:
            try:
                response = transport.call_sync("ReceiveMessage", **params)
            except QueueError:
                with self._lock:
                    orphan = box.orphan
                if orphan:  # nobody waits for it any more: the next receive will tell
                    return []
                raise
            got = [
                Received(
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

        def work() -> list[Received]:
            try:
                return receive()
            finally:
                if detach is not None:  # after the stash is filled: the next wait looks there
                    _set_from_thread(detach)

        def detached() -> list[Received]:
            try:
                return work()
            finally:
                with self._lock:
                    self._detached -= 1
                    client = self._close_later if self._detached == 0 else None
                    if client is not None:
                        self._close_later = None
                if client is not None:
                    close_client(client)

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
