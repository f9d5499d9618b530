"""A griffe extension for the API reference: reST habits in docstrings, rendered as Markdown.

blamequeue's docstrings are written for people reading them in an editor, in reST's habits:
roles (``:class:`Backend```, ``:meth:`~blamequeue.Queue.tick```) and literal blocks introduced
by ``::``.  mkdocstrings renders Markdown, so before rendering this extension turns

* a role whose target is a public object of a page of the reference into a cross-reference
  (``[Backend][blamequeue.abc.Backend]``), and any other role into inline code, so a docstring
  naming something the reference does not show never breaks the build;
* ``text::`` followed by an indented block into ``text:`` and a fenced code block.

Docstrings in the library stay as they are; only their rendering changes.
"""

from __future__ import annotations

import importlib
import re
import textwrap
from typing import Any

import griffe

# The modules that have a page in the reference (docs/reference/*.md), and so anchors.
RENDERED = (
    "blamequeue",
    "blamequeue.abc",
    "blamequeue.errors",
    "blamequeue.hookspecs",
    "blamequeue_local",
    "blamequeue_testing",
)

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|obj|exc|const):`(~?)([^`]+)`")


def _runtime(path: str) -> Any:
    """The object at dotted ``path`` (a module, then attributes), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj
    return None


def _is_rendered(identifier: str) -> bool:
    """True when ``identifier`` names a public object shown on a page of the reference."""
    for module in sorted(RENDERED, key=len, reverse=True):
        if identifier == module:
            return True
        if not identifier.startswith(module + "."):
            continue
        rest = identifier[len(module) + 1 :].split(".")
        exported = getattr(importlib.import_module(module), "__all__", None)
        if any(part.startswith("_") for part in rest):
            return False
        # hookspecs documents its hook functions without exporting them.
        hook = module == "blamequeue.hookspecs" and rest[0].startswith("blamequeue_")
        if exported is not None and rest[0] not in exported and not hook:
            return False
        return _runtime(identifier) is not None
    return False


def _public_homes(canonical: str) -> list[str]:
    """Where the reference shows the object at canonical path ``canonical`` (and its module)."""
    obj = _runtime(canonical)
    homes: list[str] = []
    for module in RENDERED:
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", ()):
            if obj is not None and getattr(mod, name, None) is obj:
                homes.append(f"{module}.{name}")
    return homes


def _scopes(obj: griffe.Object) -> list[str]:
    """The paths a relative name in ``obj``'s docstring may be relative to, nearest first."""
    scopes: list[str] = []
    node: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    while node is not None:
        if node.is_module:
            scopes.append(node.path)
            # A private module's names are shown where its package re-exports them.
            package = node.path.split("._")[0]
            if package != node.path:
                scopes.append(package)
        else:
            scopes.extend(_public_homes(node.path))
            scopes.append(node.path)
        node = node.parent
    return [*scopes, *RENDERED]


def _resolve(target: str, obj: griffe.Object) -> str | None:
    target = target.strip()
    if _is_rendered(target):
        return target
    for scope in _scopes(obj):
        candidate = f"{scope}.{target}"
        if _is_rendered(candidate):
            return candidate
        canonical = _runtime(candidate)
        if canonical is not None and "._" in candidate:
            # A name relative to a private module: find where the reference shows it.
            head, _, tail = target.partition(".")
            for home in _public_homes(f"{scope}.{head}"):
                shown = f"{home}.{tail}" if tail else home
                if _is_rendered(shown):
                    return shown
    return None


def _roles(text: str, obj: griffe.Object) -> str:
    def replace(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2)
        label = target.rsplit(".", 1)[-1] if short else target
        identifier = _resolve(target, obj)
        if identifier is None:
            return f"`{label}`"
        return f"[`{label}`][{identifier}]"

    return _ROLE.sub(replace, text)


def _literal_blocks(text: str) -> str:
    """``para::`` + blank line + indented block  ->  ``para:`` + fenced block."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.rstrip().endswith("::"):
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        in_list = indent > 0 or line.lstrip().startswith(("* ", "- "))
        # Python-Markdown nests blocks in a list item at four spaces.
        fence_indent = -(-(indent + 1) // 4) * 4 if in_list else 0
        head = line.rstrip()[:-2].rstrip()
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j == len(lines) or len(lines[j]) - len(lines[j].lstrip()) <= indent:
            out.append(line)  # no indented block follows: leave it alone
            continue
        block_indent = len(lines[j]) - len(lines[j].lstrip())
        block: list[str] = []
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) >= block_indent
        ):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            j -= 1
            block.pop()
        pad = " " * fence_indent
        out.append(head + ":" if head else "")
        out.append("")
        out.append(pad + "```")
        out.extend(
            (pad + code) if code else "" for code in textwrap.dedent("\n".join(block)).split("\n")
        )
        out.append(pad + "```")
        i = j
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrite each docstring once its package is loaded (every name resolvable then)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        self._walk(pkg, seen)

    def _walk(self, obj: griffe.Object, seen: set[int]) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if obj.docstring is not None:
            obj.docstring.value = _roles(_literal_blocks(obj.docstring.value), obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]
