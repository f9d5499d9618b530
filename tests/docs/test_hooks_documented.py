"""Every plugin hook is documented for plugin authors."""

from __future__ import annotations

import inspect
from pathlib import Path

from blamequeue import hookspecs

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"


def hook_names() -> list[str]:
    # pluggy marks each hookspec with an attribute named after the project.
    return sorted(
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if getattr(function, f"{hookspecs.PROJECT}_spec", None) is not None
    )


def test_hookspecs_are_found() -> None:
    assert "blamequeue_register_protocols" in hook_names()


def test_every_hookspec_is_documented_in_the_backend_guide() -> None:
    guide = GUIDE.read_text("utf-8")
    missing = [name for name in hook_names() if f"`{name}(register)`" not in guide]
    assert not missing, f"document these hooks in docs/writing-a-backend.md: {missing}"


def test_every_hookspec_has_a_docstring_for_the_api_reference() -> None:
    for name in hook_names():
        assert inspect.getdoc(getattr(hookspecs, name)), name
