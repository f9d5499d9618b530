"""Loading plugins: the pluggy manager, entry points, and what they registered.

Built-in backends load exactly like third-party ones, through the ``blamequeue`` entry-point
group, so ``blamequeue plugins`` shows them all the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import attrs
import pluggy

import blamequeue.hookspecs as specs

from .errors import ConfigError

__all__ = ["PluginInfo", "PluginRegistry", "load_registry"]

ENTRY_POINT_GROUP = "blamequeue"
log = logging.getLogger("blamequeue")


@attrs.frozen(kw_only=True)
class PluginInfo:
    """One loaded plugin and what it registered."""

    name: str
    distribution: str | None
    version: str | None
    protocols: tuple[str, ...] = ()
    audit_sinks: tuple[str, ...] = ()
    sealers: tuple[str, ...] = ()
    dev_servers: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Registration:
    value: Any
    plugin: str


@attrs.define(eq=False)
class PluginRegistry:
    manager: pluggy.PluginManager
    plugins: list[PluginInfo]
    protocols: dict[str, Registration]
    audit_sinks: dict[str, Registration]
    sealers: dict[str, Registration]
    dev_servers: dict[str, Registration] = attrs.field(factory=dict)
    """Factories of throwaway servers for development tools, by protocol."""
    failed: dict[str, str] = attrs.field(factory=dict)
    """Entry points that failed to import, with the error."""


def _split(value: str | None) -> set[str] | None:
    if value is None or not value.strip():
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _collect(manager: pluggy.PluginManager, hook_name: str, what: str) -> dict[str, Registration]:
    found: dict[str, Registration] = {}
    hook = getattr(manager.hook, hook_name)
    for impl in reversed(hook.get_hookimpls()):
        plugin_name = manager.get_name(impl.plugin) or repr(impl.plugin)

        def register(name: str, value: Any, *, _plugin: str = plugin_name) -> None:
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    "queue/invalid-config",
                    f"plugin {_plugin!r} registered a {what} with an empty name",
                )
            if name in found:
                raise ConfigError(
                    "queue/invalid-config",
                    f"{what} {name!r} is registered by both plugin {found[name].plugin!r} and "
                    f"plugin {_plugin!r}; disable one with BLAMEQUEUE_DISABLE_PLUGINS",
                )
            found[name] = Registration(value=value, plugin=_plugin)

        impl.function(register)
    return found


_cache: dict[tuple[str | None, str | None], PluginRegistry] = {}


def load_registry(env: Mapping[str, str] | None = None, *, refresh: bool = False) -> PluginRegistry:
    """Load the plugins allowed by ``BLAMEQUEUE_PLUGINS`` / ``BLAMEQUEUE_DISABLE_PLUGINS``."""
    env = os.environ if env is None else env
    key = (env.get("BLAMEQUEUE_PLUGINS"), env.get("BLAMEQUEUE_DISABLE_PLUGINS"))
    if not refresh and key in _cache:
        return _cache[key]
    allowed, blocked = _split(key[0]), _split(key[1]) or set()

    manager = pluggy.PluginManager(specs.PROJECT)
    manager.add_hookspecs(specs)
    dists: dict[str, tuple[str | None, str | None]] = {}
    seen: set[str] = set()
    failed: dict[str, str] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        # An editable install next to a regular one can list a plugin twice.
        if (
            ep.name in seen
            or ep.name in blocked
            or (allowed is not None and ep.name not in allowed)
        ):
            continue
        seen.add(ep.name)
        try:
            plugin = ep.load()
        except Exception as exc:
            # One broken plugin must not stop queues that never use it; the failure is named
            # when its protocol is asked for, and by `blamequeue plugins`.
            log.warning("blamequeue plugin %r (%s) failed to import: %s", ep.name, ep.value, exc)
            failed[ep.name] = f"{type(exc).__name__}: {exc}"
            continue
        manager.register(plugin, name=ep.name)
        dist = ep.dist
        dists[ep.name] = (dist.metadata["Name"] if dist else None, dist.version if dist else None)
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigError(
            "queue/invalid-config",
            f"a plugin implements a hook blamequeue does not define: {exc}; check its "
            f"blamequeue version or disable it with BLAMEQUEUE_DISABLE_PLUGINS",
        ) from exc

    protocols = _collect(manager, "blamequeue_register_protocols", "protocol")
    sinks = _collect(manager, "blamequeue_register_audit_sinks", "audit sink")
    sealers = _collect(manager, "blamequeue_register_sealers", "sealer")
    dev_servers = _collect(manager, "blamequeue_register_dev_servers", "dev server")
    infos = []
    for name, _plugin in manager.list_name_plugin():
        dist_name, version = dists.get(name, (None, None))
        infos.append(
            PluginInfo(
                name=name,
                distribution=dist_name,
                version=version,
                protocols=tuple(sorted(k for k, r in protocols.items() if r.plugin == name)),
                audit_sinks=tuple(sorted(k for k, r in sinks.items() if r.plugin == name)),
                sealers=tuple(sorted(k for k, r in sealers.items() if r.plugin == name)),
                dev_servers=tuple(sorted(k for k, r in dev_servers.items() if r.plugin == name)),
            )
        )
    registry = PluginRegistry(
        manager=manager,
        plugins=sorted(infos, key=lambda i: i.name),
        protocols=protocols,
        audit_sinks=sinks,
        sealers=sealers,
        dev_servers=dev_servers,
        failed=failed,
    )
    _cache[key] = registry
    return registry
