"""The pluggy plugin that registers protocol ``sqs`` (entry point ``sqs`` of group
``blamequeue``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blamequeue.hookspecs import hookimpl
from blamequeue_sqs._backend import SqsBackend

__all__ = ["blamequeue_register_protocols"]


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    register("sqs", SqsBackend)
