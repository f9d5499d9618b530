"""The ``amqp`` and ``nats`` protocols: named so a config using them fails clearly, not deferred
silently.  Selecting either raises ``queue/deferred-protocol``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from .abc import Backend, BackendContext, Lease, NewJob, Settlement, StoredJob, SweepResult
from .errors import ConfigError
from .hookspecs import hookimpl

__all__ = ["DEFERRED_STATUS", "AmqpBackend", "NatsBackend", "is_deferred"]

#: How listings (``blamequeue plugins``, error messages) label a deferred protocol.
DEFERRED_STATUS = "deferred: not implemented yet"


class _DeferredBackend(Backend):
    """Refuses construction; the abstract methods exist only to satisfy the contract."""

    protocol = "deferred"

    def __init__(self, options: Mapping[str, Any], context: BackendContext) -> None:
        raise ConfigError(
            "queue/deferred-protocol",
            f"protocol {self.protocol!r} (backend {context.name!r}) is named but deferred: it "
            f"is not implemented yet. Use 'local' (SQLite), 'redis' (pip install "
            f"blamequeue[redis]) or 'sqs' (pip install blamequeue[sqs]) instead.",
        )

    def _never(self) -> NoReturn:
        raise AssertionError("a deferred backend is never constructed")

    async def enqueue(self, jobs: Sequence[NewJob]) -> None:
        self._never()

    async def lease(
        self, queue: str, *, limit: int, now: float, lease_seconds: float
    ) -> list[Lease]:
        self._never()

    async def settle(self, settlements: Sequence[Settlement], *, now: float) -> list[bool]:
        self._never()

    async def extend(self, leases: Sequence[tuple[str, str]], *, expires_at: float) -> list[bool]:
        self._never()

    async def sweep(self, *, now: float, retain_done: float, expired_error: str) -> SweepResult:
        self._never()

    async def size(self, queue: str) -> int:
        self._never()

    async def purge(self, queue: str) -> int:
        self._never()

    async def dlq_list(self, queue: str, *, limit: int | None) -> list[StoredJob]:
        self._never()

    async def dlq_retry(self, job_id: str, *, now: float) -> StoredJob | None:
        self._never()

    async def dlq_size(self, queue: str) -> int:
        self._never()

    async def dlq_purge(self, queue: str) -> int:
        self._never()


def is_deferred(backend_class: object) -> bool:
    """Whether a registered protocol's class is one of these named-but-deferred ones."""
    return isinstance(backend_class, type) and issubclass(backend_class, _DeferredBackend)


class AmqpBackend(_DeferredBackend):
    protocol = "amqp"


class NatsBackend(_DeferredBackend):
    protocol = "nats"


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Backend]], None]) -> None:
    register("amqp", AmqpBackend)
    register("nats", NatsBackend)
