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


def import_circles(source_root: Path) -> list[list[Import]]:
    """The circles of imports among the modules under ``source_root``: per strongly connected
    component, the imports between its modules.  A target counts as the module it names, or the
    module a name comes from: ``from pkg import x`` imports ``pkg`` (its ``__init__``)."""
    graph = import_graph(source_root)
    modules = {found.module for found in graph}
    edges: dict[str, set[Import]] = {}
    for found in graph:
        target = found.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != found.module:
            edges.setdefault(found.module, set()).add(attrs.evolve(found, target=target))

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for found in edges.get(todo.pop(), ()):
                if found.target not in seen:
                    seen.add(found.target)
                    todo.append(found.target)
        return seen

    reach = {module: reachable(module) for module in sorted(modules)}
    circles: list[list[Import]] = []
    placed: set[str] = set()
    for module, reached in reach.items():
        if module in reached and module not in placed:
            members = {other for other in reached if module in reach[other]}
            placed |= members
            inside = [e for m in members for e in edges[m] if e.target in members]
            circles.append(sorted(inside, key=lambda e: (e.module, e.line, e.target)))
    return circles


def _package(root: Path, modules: dict[str, str]) -> None:
    """Write the package ``pkg`` under ``root``: each module's name and source."""
    (root / "pkg").mkdir()
    for name, source in modules.items():
        (root / "pkg" / f"{name}.py").write_text(source)


def test_the_graph_sees_imports_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__": "",
            "mod": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    import hidden.typing_only\n"
            "def f():\n"
            "    from .sibling import name\n"
            "    from .. import outside\n",
        },
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


def test_a_circle_closed_in_a_function_or_under_type_checking_is_found(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "__init__": "from .a import A\n",
            "a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.b\n",
            "b": "def f():\n    from pkg import a\n",
            "c": "from . import b\n",  # imports into the circle, is not in it
        },
    )
    (circle,) = import_circles(tmp_path)
    assert {(e.module, e.target) for e in circle} == {
        ("pkg", "pkg.a"),
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg"),
        ("pkg.b", "pkg.a"),
    }


def test_core_has_no_import_cycles() -> None:
    """Each module of core is importable and testable on its own terms: no module imports,
    even for typing or inside a function, one that imports it back.  Cut an edge below by
    passing in what the module needs (a runtime, a callable, a small Protocol)."""
    circles = import_circles(CORE_SOURCE)
    described = [
        f"circle of {len({e.module for e in circle})} modules:\n"
        + "\n".join(
            f"  {e.module} -> {e.target}  ({e.path.relative_to(ROOT)}:{e.line})" for e in circle
        )
        for circle in circles
    ]
    assert not circles, "core's imports go round in circles:\n" + "\n".join(described)
