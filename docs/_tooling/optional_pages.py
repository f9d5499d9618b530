"""A MkDocs hook: the navigation lists pages that other distributions' authors may not have
written yet (the redis and sqs backend pages, the reliability report); those are left out of
the site's navigation until their file exists, so ``mkdocs build --strict`` keeps passing.

Only the pages named in :data:`OPTIONAL` are pruned: any other missing page stays an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPTIONAL = frozenset({"backends/redis.md", "backends/sqs.md", "reliability.md"})


def _prune(nav: list[Any], docs: Path) -> list[Any]:
    kept: list[Any] = []
    for item in nav:
        if isinstance(item, dict):
            ((title, target),) = item.items()
            if isinstance(target, list):
                children = _prune(target, docs)
                if children:
                    kept.append({title: children})
                continue
            item_path = target
        else:
            item_path = item
        if isinstance(item_path, str) and item_path in OPTIONAL and not (docs / item_path).exists():
            continue
        kept.append(item)
    return kept


def on_config(config: Any, **kwargs: Any) -> Any:
    if config.nav:
        config.nav = _prune(config.nav, Path(config.docs_dir))
    return config
