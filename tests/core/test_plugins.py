"""Plugins: entry points, allow/block lists, validation, and the documented hooks."""

from __future__ import annotations

import inspect
import types
from typing import Any

import pluggy
import pytest

from blamequeue import QueueError, hookimpl, hookspecs
from blamequeue._plugins import ENTRY_POINT_GROUP, _collect, load_registry


def test_shipped_protocols_all_come_in_through_entry_points() -> None:
    registry = load_registry(refresh=True)
    assert {"local", "memory", "amqp", "nats"} <= set(registry.protocols)
    by_name = {p.name: p for p in registry.plugins}
    assert by_name["deferred"].distribution == "blamequeue-core"
    assert by_name["deferred"].protocols == ("amqp", "nats")
    assert by_name["memory"].distribution == "blamequeue-testing"
    assert by_name["local"].distribution == "blamequeue-local"
    assert all(p.version == "0.1.0" for p in registry.plugins if p.distribution)


def test_the_testing_distribution_registers_the_bench_servers() -> None:
    from blamequeue_testing.servers import redis_dev_server, sqs_dev_server

    registry = load_registry(refresh=True)
    assert registry.dev_servers["redis"].value is redis_dev_server
    assert registry.dev_servers["sqs"].value is sqs_dev_server
    assert {p.name: p for p in registry.plugins}["memory"].dev_servers == ("redis", "sqs")
    blocked = load_registry({"BLAMEQUEUE_DISABLE_PLUGINS": "memory"}, refresh=True)
    assert blocked.dev_servers == {}


def test_a_dev_server_registered_twice_names_both_plugins() -> None:
    def make() -> object:
        @hookimpl
        def blamequeue_register_dev_servers(register: Any) -> None:
            register("redis", lambda url: None)

        return types.SimpleNamespace(
            blamequeue_register_dev_servers=blamequeue_register_dev_servers
        )

    with pytest.raises(QueueError) as info:
        _collect(_manager_with(make(), make()), "blamequeue_register_dev_servers", "dev server")
    assert info.value.code == "queue/invalid-config"
    assert "dev server 'redis'" in info.value.message


def test_allow_list_loads_only_named_plugins() -> None:
    registry = load_registry({"BLAMEQUEUE_PLUGINS": "memory"}, refresh=True)
    assert set(registry.protocols) == {"memory"}


def test_block_list_skips_named_plugins() -> None:
    registry = load_registry({"BLAMEQUEUE_DISABLE_PLUGINS": "deferred, memory"}, refresh=True)
    assert "amqp" not in registry.protocols
    assert "memory" not in registry.protocols
    assert "local" in registry.protocols


def test_registry_is_cached_per_environment() -> None:
    env = {"BLAMEQUEUE_PLUGINS": "memory"}
    assert load_registry(env) is load_registry(env)


def _manager_with(*plugins: object) -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for i, plugin in enumerate(plugins):
        manager.register(plugin, name=f"p{i}")
    return manager


def test_a_protocol_registered_twice_names_both_plugins() -> None:
    def make() -> object:
        @hookimpl
        def blamequeue_register_protocols(register: Any) -> None:
            register("dup", object)

        return types.SimpleNamespace(blamequeue_register_protocols=blamequeue_register_protocols)

    manager = _manager_with(make(), make())
    with pytest.raises(QueueError) as info:
        _collect(manager, "blamequeue_register_protocols", "protocol")
    assert info.value.code == "queue/invalid-config"
    assert "'p0'" in info.value.message
    assert "'p1'" in info.value.message


def test_an_unknown_hook_implementation_is_rejected() -> None:
    @hookimpl
    def blamequeue_register_widgets(register: Any) -> None:
        raise AssertionError("never called")

    manager = _manager_with(
        types.SimpleNamespace(blamequeue_register_widgets=blamequeue_register_widgets)
    )
    with pytest.raises(pluggy.PluginValidationError):
        manager.check_pending()


def test_entry_point_group_is_blamequeue() -> None:
    assert ENTRY_POINT_GROUP == hookspecs.PROJECT == "blamequeue"


def test_every_hook_is_documented_and_prefixed() -> None:
    hooks = [
        (name, fn)
        for name, fn in vars(hookspecs).items()
        if inspect.isfunction(fn) and hasattr(fn, "blamequeue_spec")
    ]
    assert {name for name, _ in hooks} == {
        "blamequeue_register_protocols",
        "blamequeue_register_audit_sinks",
        "blamequeue_register_sealers",
        "blamequeue_register_dev_servers",
    }
    for name, fn in hooks:
        assert name.startswith("blamequeue_")
        assert fn.__doc__, name
        assert len(fn.__doc__.strip()) > 40, name
        assert list(inspect.signature(fn).parameters) == ["register"]
