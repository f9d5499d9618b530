"""The shared records as the jobs layer uses them (``Capabilities.records``).

Batches, schedules, metrics and pause flags keep small state in the store so every process
sharing it sees the same thing.  :class:`RecordStore` is their one door to it: it checks the
backend can keep records (else ``queue/records-unsupported`` before anything is written), reads
the time from the queue's clock, goes through the backend's breaker and retry policy like every
other backend call, and encodes JSON values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._codec import compact_json
from ._runtime import BackendRuntime
from .abc import Record, Records
from .errors import BadArgumentError

__all__ = ["RecordStore", "decode_value"]


def _check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise BadArgumentError(
            "queue/bad-argument",
            f"a record {what} must be a non-empty string without NUL, got {value!r}",
        )
    return value


def _check_deltas(deltas: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(deltas, Mapping):
        raise BadArgumentError(
            "queue/bad-argument",
            f"deltas must be a mapping of counter names to numbers, got {deltas!r}",
        )
    checked: dict[str, float] = {}
    for name, delta in deltas.items():
        _check_name("counter name", name)
        if (
            isinstance(delta, bool)
            or not isinstance(delta, int | float)
            or not math.isfinite(delta)
        ):
            raise BadArgumentError(
                "queue/bad-argument",
                f"counter {name!r}: a delta must be a finite int or float, got {delta!r}",
            )
        checked[name] = delta
    return checked


def decode_value(record: Record | None) -> Any:
    """The JSON value of ``record`` (``None`` for no record or no value)."""
    if record is None or record.value is None:
        return None
    return json.loads(record.value)


class RecordStore:
    """Shared records of one backend, with the queue's clock and breaker."""

    def __init__(self, runtime: BackendRuntime) -> None:
        self.backend = Records.of(runtime.backend)
        self.runtime = runtime

    @property
    def backend_name(self) -> str:
        return self.runtime.name

    def now(self) -> float:
        return self.runtime.clock.now()

    async def put(
        self,
        kind: str,
        key: str,
        value: Any,
        *,
        expires_at: float | None = None,
        if_absent: bool = False,
    ) -> bool:
        """Store ``value`` (JSON) under ``(kind, key)``; see :meth:`Backend.record_put`."""
        _check_name("kind", kind)
        _check_name("key", key)
        data = compact_json(value).encode()
        backend, now = self.backend, self.now()
        return await self.runtime.call(
            "record_put",
            lambda: backend.record_put(
                kind, key, data, now=now, expires_at=expires_at, if_absent=if_absent
            ),
        )

    async def get(self, kind: str, key: str) -> Record | None:
        backend, now = self.backend, self.now()
        return await self.runtime.call("record_get", lambda: backend.record_get(kind, key, now=now))

    async def get_value(self, kind: str, key: str) -> Any:
        """The JSON value stored under ``(kind, key)``, or ``None``."""
        return decode_value(await self.get(kind, key))

    async def get_many(self, kind: str, keys: Sequence[str]) -> list[Record | None]:
        if not keys:
            return []
        backend, now, wanted = self.backend, self.now(), list(keys)
        return await self.runtime.call(
            "record_get_many", lambda: backend.record_get_many(kind, wanted, now=now)
        )

    async def list(self, kind: str, *, prefix: str = "", limit: int | None = None) -> list[Record]:
        backend, now = self.backend, self.now()
        return await self.runtime.call(
            "record_list",
            lambda: backend.record_list(kind, now=now, prefix=prefix, limit=limit),
        )

    async def add(
        self,
        kind: str,
        key: str,
        deltas: Mapping[str, float],
        *,
        expires_at: float | None = None,
        once: str | None = None,
    ) -> tuple[Record, bool]:
        """Add to counters of ``(kind, key)``; see :meth:`Backend.record_add`."""
        _check_name("kind", kind)
        _check_name("key", key)
        backend, now, changes = self.backend, self.now(), _check_deltas(deltas)
        return await self.runtime.call(
            "record_add",
            lambda: backend.record_add(
                kind, key, changes, now=now, expires_at=expires_at, once=once
            ),
        )

    async def delete(self, kind: str, key: str) -> bool:
        backend = self.backend
        return await self.runtime.call("record_delete", lambda: backend.record_delete(kind, key))
