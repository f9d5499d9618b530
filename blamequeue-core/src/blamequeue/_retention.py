"""Retention beyond ``retain_done`` (SPEC §3.12): ``retain_dead``, ``retain_done_count`` and
``retain_dead_count``, parsed into the runtime's :class:`~blamequeue.abc.Retention` and applied
after each sweep by a backend with the :class:`~blamequeue.abc.RetentionLimits` facet (the
runtime refuses them on any other when the queue is built)."""

from __future__ import annotations

from ._runtime import BackendRuntime
from .abc import RetentionLimits

__all__ = ["done_retention", "prune_finished"]


async def prune_finished(runtime: BackendRuntime) -> int:
    """Delete the finished jobs the runtime's retention limits no longer keep; returns how
    many (0 when no limit is set)."""
    retention, backend = runtime.retention, runtime.backend
    if not retention.limited or not isinstance(backend, RetentionLimits):
        return 0
    now = runtime.clock.now()
    return await runtime.call(
        "prune_finished", lambda: backend.prune_finished(now=now, retention=retention)
    )


def done_retention(runtime: BackendRuntime) -> str:
    """How long (and how many) done jobs ``runtime`` keeps, for messages about pruned ones."""
    text = f"retain_done={runtime.retain_done:g} s"
    if runtime.retention.done_count is not None:
        text += f", retain_done_count={runtime.retention.done_count}"
    return text
