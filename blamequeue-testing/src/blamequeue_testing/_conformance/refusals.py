"""Checking that a call is refused with a stable ``QueueError`` code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from blamequeue import QueueError

__all__ = ["refused", "refused_at_once"]


async def refused(code: str, call: Awaitable[object], *, case: object = None) -> QueueError:
    """Await ``call``, which must raise a ``QueueError`` coded ``code``; return the error.

    ``case`` names the input of a loop's round in the failure message."""
    with pytest.raises(QueueError) as info:
        await call
    assert info.value.code == code, (case, info.value) if case is not None else info.value
    return info.value


def refused_at_once(code: str, call: Callable[[], object], *, case: object = None) -> QueueError:
    """Call ``call`` (not a coroutine), which must raise a ``QueueError`` coded ``code``."""
    with pytest.raises(QueueError) as info:
        call()
    assert info.value.code == code, (case, info.value) if case is not None else info.value
    return info.value
