"""The documentation site builds with `mkdocs build --strict` (every warning is an error): broken
links and anchors, pages missing from the navigation's targets, docstrings mkdocstrings cannot
render, and cross-references to nothing all fail here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = (
    "blamequeue",
    "blamequeue.abc",
    "blamequeue.errors",
    "blamequeue.hookspecs",
    "blamequeue_local",
    "blamequeue_redis",
    "blamequeue_sqs",
    "blamequeue_testing",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(
                f"{module} is not installed: the docs tools are in the dev extra "
                f"(pip install -e '.[dev]')"
            )
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site_dir


def test_the_site_builds_with_warnings_as_errors(site: Path) -> None:
    assert (site / "index.html").exists()
    for page in ("getting-started", "concepts", "operations", "errors", "comparison"):
        assert (site / page / "index.html").exists(), page


def test_every_backend_page_is_in_the_navigation(site: Path) -> None:
    # The navigation lists pages by hand; a backend page nobody added to it would be built but
    # unreachable.  (Pages written by other distributions appear once their file exists.)
    home = (site / "index.html").read_text("utf-8")
    for page in sorted((DOCS / "backends").glob("*.md")):
        assert f'href="backends/{page.stem}/"' in home, f"{page.name} is not in mkdocs.yml's nav"


@pytest.mark.parametrize("module", REFERENCE)
def test_the_api_reference_is_generated_from_the_docstrings(site: Path, module: str) -> None:
    page = (site / "reference" / module / "index.html").read_text("utf-8")
    assert f'id="{module}"' in page
    exported = getattr(__import__(module, fromlist=["__all__"]), "__all__", [])
    for name in exported:
        if not name.startswith("_"):
            assert f'id="{module}.{name}"' in page, f"{module}.{name} is missing from the reference"
