"""What the worker remembers between jobs (a handler's kind, the last time it converted) never
changes an answer."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from blamequeue._clock import to_datetime
from blamequeue._execution import _is_async


def test_times_convert_the_same_however_they_repeat() -> None:
    for seconds in (1.5e9, 1.5e9, 0.0, 1.5e9, 1_700_000_000.123456, 0.0):
        assert to_datetime(seconds) == datetime.fromtimestamp(seconds, tz=UTC)


class AsyncCallable:
    __hash__ = None  # type: ignore[assignment]  # unhashable: asked every time

    async def __call__(self, job: Any, ctx: Any) -> None: ...


def test_each_handler_keeps_its_own_kind() -> None:
    async def coroutine(job: Any, ctx: Any) -> None: ...

    def plain(job: Any, ctx: Any) -> None: ...

    handlers = [coroutine, plain, functools.partial(coroutine), functools.partial(plain), print]
    for _ in range(2):  # the second round answers from what the first one remembered
        assert [_is_async(h) for h in handlers] == [True, False, True, False, False]
        assert _is_async(AsyncCallable())
