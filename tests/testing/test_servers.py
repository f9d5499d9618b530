"""``blamequeue_testing.servers``: throwaway servers for test suites and ``blamequeue bench``.
(The servers themselves run in tests/redis, tests/sqs and the bench tests.)"""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest

import blamequeue_testing.servers as servers
from blamequeue.errors import QueueError
from blamequeue_testing.servers import MotoServer, RedisServer, RedisServerError


def test_all_lists_every_public_name_and_each_is_documented() -> None:
    public = {
        name
        for name, value in vars(servers).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", servers.__name__) == servers.__name__
        and name != "annotations"
    }
    assert set(servers.__all__) == public
    for name in servers.__all__:
        value = getattr(servers, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), name


def test_a_missing_redis_server_binary_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(RedisServerError) as info:
        RedisServer(executable=str(tmp_path / "redis-server"))
    assert isinstance(info.value, QueueError)
    assert info.value.code == "queue/backend-unavailable"
    assert not info.value.retryable
    assert "apt-get install redis-server" in info.value.message


def test_a_missing_moto_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(servers.MotoServerError) as info:
        MotoServer().start()
    assert not info.value.retryable
    assert "pip install 'blamequeue-testing[sqs]'" in info.value.message


def test_a_cluster_node_port_leaves_its_bus_port_free() -> None:
    port = servers.free_port(cluster_bus=True)
    assert 20_000 <= port <= 55_535
