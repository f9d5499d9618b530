"""The plugin of blamequeue-testing (entry point ``blamequeue: memory``): the ``memory``
protocol, and the throwaway servers ``blamequeue bench`` starts for ``redis`` and ``sqs``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blamequeue.hookspecs import hookimpl

from ._memory import MemoryBackend
from .servers import redis_dev_server, sqs_dev_server

__all__ = ["blamequeue_register_dev_servers", "blamequeue_register_protocols"]


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    register("memory", MemoryBackend)


@hookimpl
def blamequeue_register_dev_servers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("redis", redis_dev_server)
    register("sqs", sqs_dev_server)
