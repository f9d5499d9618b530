"""What the docs teach imports only public names: no module or name with a leading underscore
of blamequeue's distributions, in the README, the pages' code or the examples' sources."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = "blamequeue|blamequeue_local|blamequeue_redis|blamequeue_sqs|blamequeue_testing"
IMPORT = re.compile(
    rf"^\s*(?:from\s+(?P<module>(?:{PACKAGES})\b(?:\.\w+)*)\s+import\s+(?P<names>[^#\n]+)"
    rf"|import\s+(?P<plain>(?:{PACKAGES})\b(?:\.\w+)*))",
    re.MULTILINE,
)


def sources() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    code = sorted((ROOT / "docs" / "examples").rglob("*.py"))
    return [p for p in pages + code if "node_modules" not in p.parts]


def private_imports(text: str) -> list[str]:
    found = []
    for match in IMPORT.finditer(text):
        module = match.group("module") or match.group("plain")
        names = re.findall(r"\w+", match.group("names") or "")
        if any(part.startswith("_") for part in module.split(".")[1:]) or any(
            name.startswith("_") for name in names
        ):
            found.append(match.group(0).strip())
    return found


def test_the_check_sees_a_private_import() -> None:
    assert private_imports("from blamequeue._dashboard import app\n") == [
        "from blamequeue._dashboard import app"
    ]
    assert private_imports("    from blamequeue import Queue, _codec\n") != []
    assert private_imports("import blamequeue_redis._wire\n") != []
    assert private_imports("from blamequeue import Queue\nimport blamequeue.abc\n") == []


def test_the_docs_import_only_public_names() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sources()
        if (found := private_imports(path.read_text()))
    }
    assert offenders == {}
