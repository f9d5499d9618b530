"""Running one test over a table of named cases."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

__all__ = ["each"]


def each(argnames: str, table: Mapping[str, object]) -> pytest.MarkDecorator:
    """Parametrize ``argnames`` with the values of ``table`` (a tuple per case for several
    names), each case's test id its key."""
    return pytest.mark.parametrize(argnames, list(table.values()), ids=list(table))
