"""What the backend remembers of calls it already answered: a bounded, oldest-first memo.

The core retries a call that failed part-way (an enqueue of many jobs, a settle of many
leases); SQS has no transactions, so the backend remembers what it applied (job ids sent,
receipt handles settled, job ids completed) and a retry applies only the rest, with the same
answers.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

__all__ = ["MEMO_SIZE", "Memo"]

V = TypeVar("V")

MEMO_SIZE: Final = 50_000
"""How many keys a memo keeps; the oldest are forgotten first."""


class Memo(Generic[V]):
    """Recent keys and a value for each, at most ``size`` of them."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self._size = size
        self._values: dict[str, V] = {}

    def remember(self, key: str, value: V) -> None:
        values = self._values
        values[key] = value
        while len(values) > self._size:
            del values[next(iter(values))]

    def get(self, key: str, default: V) -> V:
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values
