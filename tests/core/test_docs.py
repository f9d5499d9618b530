"""The documentation stays in step with the code."""

from __future__ import annotations

import re
from pathlib import Path

from blamequeue.errors import ERROR_CODES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_error_code_is_documented_and_nothing_else() -> None:
    table = (DOCS / "errors.md").read_text()
    documented = set(re.findall(r"^\| `(queue/[a-z-]+)` \|", table, flags=re.MULTILINE))
    assert documented == set(ERROR_CODES)
