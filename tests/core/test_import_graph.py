"""What the distributions' modules import, read from their source (never by importing them).

:func:`import_graph` parses every module under a source root with :mod:`ast` and lists every
import statement: at module level, inside functions, and under ``if TYPE_CHECKING:`` alike,
with relative imports resolved to absolute names.  Checks on who may import whom are written
against it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
CORE_SOURCE = ROOT / "blamequeue-core" / "src"


@attrs.frozen(kw_only=True)
class Import:
    """One import statement: ``module`` (absolute, dotted) imports ``target`` at ``line``."""

    module: str
    target: str
    path: Path
    line: int

    def within(self, package: str) -> bool:
        return self.target == package or self.target.startswith(f"{package}.")


def _module_name(source_root: Path, path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(source_root: Path, path: Path) -> Iterable[Import]:
    """Every import in the module at ``path`` (a file under ``source_root``)."""
    module, is_package = _module_name(source_root, path)
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module=module, target=alias.name, path=path, line=node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            if target:
                yield Import(module=module, target=target, path=path, line=node.lineno)
            # `from pkg import sub` may import the module pkg.sub.
            for alias in node.names:
                if alias.name != "*":
                    child = f"{target}.{alias.name}" if target else alias.name
                    yield Import(module=module, target=child, path=path, line=node.lineno)


def import_graph(source_root: Path) -> list[Import]:
    """Every import of every module under ``source_root`` (a ``src/`` directory)."""
    return [
        found
        for path in sorted(source_root.rglob("*.py"))
        for found in imports_of(source_root, path)
    ]


def test_the_graph_sees_imports_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import hidden.typing_only\n"
        "def f():\n"
        "    from .sibling import name\n"
        "    from .. import outside\n"
    )
    targets = {found.target for found in import_graph(tmp_path)}
    assert {"hidden.typing_only", "pkg.sibling", "pkg.sibling.name", "outside"} <= targets


def test_core_never_imports_a_backend_or_the_testing_distribution() -> None:
    forbidden = ("blamequeue_redis", "blamequeue_sqs", "blamequeue_local", "blamequeue_testing")
    graph = import_graph(CORE_SOURCE)
    assert len({found.module for found in graph}) > 20  # the whole of core was read
    offending = [
        f"{found.path.relative_to(ROOT)}:{found.line} imports {found.target}"
        for found in graph
        if any(found.within(package) for package in forbidden)
    ]
    assert not offending, "core must reach backends only through plugins:\n" + "\n".join(offending)
