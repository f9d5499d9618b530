"""The plugin blamequeue loads through the entry point ``example`` (group ``blamequeue``).

Hooks only register things; importing this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blamequeue import hookimpl

from blamequeue_example.backend import JsonFileBackend, JsonFileStore


@hookimpl
def blamequeue_register_protocols(register: Callable[[str, type[Any]], None]) -> None:
    register("jsonfile-basic", JsonFileStore)  # the required part of the contract only
    register("jsonfile", JsonFileBackend)  # and three facets
