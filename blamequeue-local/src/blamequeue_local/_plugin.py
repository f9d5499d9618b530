"""The pluggy plugin that registers protocol ``local`` (entry point ``local`` of group
``blamequeue``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blamequeue.hookspecs import hookimpl
from blamequeue_local._backend import LocalBackend

__all__ = ["blamequeue_register_protocols"]


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    register("local", LocalBackend)
