"""What a test class of the suite needs from the backend, said once above the class.

``@requires("dlq", "there is no dead-letter queue to check")`` marks the class for anyio (so
every test runs on asyncio and on trio) and gives it an autouse fixture that skips each of its
tests, saying why, on a backend that does not declare the capability; ``@requires_virtual_leases``
and ``@requires_virtual_time(why)`` do the same for a store that keeps leases or due times on a
clock of its own, which the virtual clock cannot move.  Stacked, each adds its own check.
``@lacking("dlq", "TestDeadLetterQueue covers it")`` is the other way round: the class checks
how a backend without the capability refuses, and is skipped on one that declares it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from .fixtures import Conformance

__all__ = ["lacking", "requires", "requires_virtual_leases", "requires_virtual_time"]

_Class = TypeVar("_Class", bound=type)


def requires(flag: str, why: str) -> Callable[[_Class], _Class]:
    """Skip every test of the class unless the backend declares capability ``flag``."""
    return _skipping_unless(f"_requires_{flag}", lambda conformance: conformance.require(flag, why))


def requires_virtual_leases(cls: _Class) -> _Class:
    """Skip every test of the class when the store expires leases on a clock of its own."""
    return _skipping_unless("_requires_virtual_leases", Conformance.require_virtual_leases)(cls)


def requires_virtual_time(why: str) -> Callable[[_Class], _Class]:
    """Skip every test of the class when the store keeps due times on a clock of its own."""
    return _skipping_unless(
        "_requires_virtual_time", lambda conformance: conformance.require_virtual_time(why)
    )


def lacking(flag: str, why: str) -> Callable[[_Class], _Class]:
    """Skip every test of the class when the backend declares capability ``flag``."""

    def skip_if_capable(conformance: Conformance) -> None:
        if getattr(conformance.capabilities, flag):
            pytest.skip(f"backend declares {flag}=True: {why}")

    return _skipping_unless(f"_lacking_{flag}", skip_if_capable)


def _skipping_unless(
    fixture_name: str, check: Callable[[Conformance], None]
) -> Callable[[_Class], _Class]:
    def decorate(cls: _Class) -> _Class:
        def skip_unless_capable(self: object, conformance: Conformance) -> None:
            check(conformance)

        fixture = pytest.fixture(autouse=True, name=fixture_name)(skip_unless_capable)
        setattr(cls, fixture_name, fixture)
        if not any(mark.name == "anyio" for mark in getattr(cls, "pytestmark", [])):
            cls = pytest.mark.anyio(cls)
        return cls

    return decorate
