"""A worked example of a blamequeue backend plugin: protocol ``jsonfile``.

Install the distribution and ``Queue(backends={"main": {"protocol": "jsonfile",
"path": "jobs.json"}})`` works: the entry point in ``pyproject.toml`` names
:mod:`blamequeue_example.plugin`, whose hook registers :class:`JsonFileBackend`.
"""

from __future__ import annotations

from blamequeue_example.backend import JsonFileBackend

__all__ = ["JsonFileBackend"]
