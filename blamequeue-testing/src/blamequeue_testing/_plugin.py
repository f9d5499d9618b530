"""Registers the ``memory`` protocol (entry point ``blamequeue: memory``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blamequeue.hookspecs import hookimpl

from ._memory import MemoryBackend

__all__ = ["blamequeue_register_protocols"]


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    register("memory", MemoryBackend)
