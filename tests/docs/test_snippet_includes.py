"""Every file the docs include (``--8<-- "path"`` / ``"path:section"``) is spelled so the site
builder reads it, and exists: a code formatter that takes the include for Python once turned
``--8<--`` into ``--8 < --``, and the pages showed the line instead of the example."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$')


def test_every_include_is_well_formed_and_names_a_file() -> None:
    bad = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            stripped = line.strip()
            if "--8" not in stripped or "[start:" in stripped or "[end:" in stripped:
                continue
            match = _INCLUDE.match(stripped)
            where = f"{page.relative_to(ROOT)}:{number}: {stripped}"
            if match is None:
                bad.append(f'{where} (not --8<-- "path")')
            elif not (ROOT / match["path"]).is_file():
                bad.append(f"{where} (no such file)")
            elif (
                match["section"]
                and f"[start:{match['section']}]" not in (ROOT / match["path"]).read_text()
            ):
                bad.append(f"{where} (no such section)")
    assert not bad, "\n".join(bad)
