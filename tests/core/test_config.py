"""Queue construction and Queue.from_env: every mistake is a clear QueueError before any I/O."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from blamequeue import Queue, QueueError

MEMORY = {"protocol": "memory"}


def error_of(**kwargs: Any) -> QueueError:
    with pytest.raises(QueueError) as info:
        Queue(**kwargs)
    return info.value


@pytest.mark.parametrize("backends", [None, {}, [], "local"])
def test_missing_or_empty_backends_is_invalid_config(backends: Any) -> None:
    err = error_of(backends=backends)
    assert err.code == "queue/invalid-config"
    assert "protocol" in err.message  # shows what a config looks like


def test_unknown_protocol_is_invalid_config_and_lists_installed_ones() -> None:
    err = error_of(backends={"a": {"protocol": "kafka"}})
    assert err.code == "queue/invalid-config"
    assert "'kafka'" in err.message
    assert "memory" in err.message


@pytest.mark.parametrize(
    ("protocol", "guess"),
    [
        ("reds", "(did you mean 'redis'?)"),
        ("reds://127.0.0.1:6379/0", "(did you mean 'redis://'?)"),
    ],
)
def test_a_mistyped_protocol_gets_a_did_you_mean(protocol: str, guess: str) -> None:
    err = error_of(backends={"a": {"protocol": protocol}})
    assert err.code == "queue/invalid-config"
    assert f"unknown protocol {protocol!r} {guess}; installed protocols: " in err.message
    # The deferred protocols are named apart from the ones that work.
    assert "; named but not implemented yet (deferred): amqp, nats." in err.message


@pytest.mark.parametrize(("protocol", "extra"), [("redis", "redis"), ("sqs", "sqs")])
def test_a_shipped_protocol_that_is_not_installed_says_what_to_install(
    protocol: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_DISABLE_PLUGINS", protocol)
    err = error_of(backends={"a": {"protocol": protocol}})
    assert err.code == "queue/invalid-config"
    assert f"pip install blamequeue[{extra}]" in err.message


def test_missing_protocol_key_is_invalid_config() -> None:
    assert error_of(backends={"a": {"path": "x.db"}}).code == "queue/invalid-config"


@pytest.mark.parametrize("protocol", ["amqp", "nats"])
def test_deferred_protocols_say_they_are_deferred(protocol: str) -> None:
    err = error_of(backends={"a": {"protocol": protocol}})
    assert err.code == "queue/deferred-protocol"
    assert "deferred" in err.message
    assert "local" in err.message  # and what to use instead


def test_default_backend_may_be_omitted_with_one_backend_only() -> None:
    assert Queue(backends={"only": MEMORY}).default_backend == "only"
    err = error_of(backends={"a": MEMORY, "b": MEMORY})
    assert err.code == "queue/invalid-config"
    assert "default_backend" in err.message


def test_unknown_default_backend_is_invalid_config() -> None:
    err = error_of(backends={"a": MEMORY}, default_backend="b")
    assert err.code == "queue/invalid-config"
    assert "'b'" in err.message


@pytest.mark.parametrize("interval", [-1, float("nan"), float("inf"), "30", True])
def test_bad_sweep_interval_is_invalid_config(interval: Any) -> None:
    assert error_of(backends={"a": MEMORY}, sweep_interval=interval).code == "queue/invalid-config"


@pytest.mark.parametrize(
    "config",
    [
        {"protocol": "memory", "max_attempts": 0},
        {"protocol": "memory", "max_attempts": "3"},
        {"protocol": "memory", "retain_done": -1},
        {"protocol": "memory", "retry": {"attempts": 0}},
        {"protocol": "memory", "retry": {"tries": 3}},
        {"protocol": "memory", "breaker": {"failure_threshold": 0}},
        {"protocol": "memory", "breaker": "on"},
        {"protocol": "memory", "backoff": {"strategy": "nope"}},
        {"protocol": "memory", "backoff": {"strategy": "fixed", "delay": -2}},
        {"protocol": "memory", "no_such_option": 1},
    ],
)
def test_bad_common_backend_options_are_invalid_config(config: dict[str, Any]) -> None:
    assert error_of(backends={"a": config}).code == "queue/invalid-config"


def test_a_bad_audit_sink_is_refused() -> None:
    assert error_of(backends={"a": MEMORY}, audit_sinks=[object()]).code == "queue/invalid-config"


def test_list_backends_before_start_is_not_initialized() -> None:
    queue = Queue(backends={"a": MEMORY})
    with pytest.raises(QueueError) as info:
        queue.list_backends()
    assert info.value.code == "queue/not-initialized"


# -- Queue.from_env ---------------------------------------------------------------------------


def test_from_env_defaults_to_local(tmp_path: Any) -> None:
    queue = Queue.from_env({"BLAMEQUEUE_LOCAL_PATH": str(tmp_path / "q.db")})
    assert queue.default_backend == "default"


def test_from_env_builds_memory() -> None:
    Queue.from_env({"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SWEEP_INTERVAL": "0"})


def test_from_env_refuses_an_unknown_protocol() -> None:
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "postgres"})
    assert info.value.code == "queue/invalid-config"
    assert "local" in info.value.message
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "reds"})
    assert "is not a protocol (did you mean 'redis'?)" in info.value.message


def test_from_env_redis_needs_a_url() -> None:
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "redis"})
    assert "BLAMEQUEUE_REDIS_URL" in info.value.message


def test_from_env_sqs_needs_a_queue_url() -> None:
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "sqs"})
    assert "BLAMEQUEUE_SQS_QUEUE_URL" in info.value.message


def test_from_env_redis_without_its_distribution_says_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_DISABLE_PLUGINS", "redis")
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "redis", "BLAMEQUEUE_REDIS_URL": "redis://x"})
    assert "pip install blamequeue[redis]" in info.value.message


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_from_env_refuses_a_bad_sweep_interval(value: str) -> None:
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SWEEP_INTERVAL": value})
    assert info.value.code == "queue/invalid-config"


def test_from_env_parses_seal_keys_in_order() -> None:
    from blamequeue._environment import config_from_env

    k1 = base64.b64encode(b"1" * 32).decode()
    k2 = base64.b64encode(b"2" * 32).decode()
    _config, kwargs = config_from_env(
        {"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SEAL_KEYS": f"k2:{k2}, k1:{k1}"}
    )
    assert list(kwargs["seal"]["keys"]) == ["k2", "k1"]


@pytest.mark.parametrize(
    "value",
    ["nocolon", "k1:not-base64!", f"k1:{base64.b64encode(b'short').decode()}", ","],
)
def test_from_env_refuses_malformed_seal_keys(value: str) -> None:
    with pytest.raises(QueueError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SEAL_KEYS": value})
    assert info.value.code == "queue/invalid-config"
    assert "BLAMEQUEUE_SEAL_KEYS" in info.value.message


def test_from_env_redis_tls_is_inferred_or_forced() -> None:
    from blamequeue._environment import config_from_env

    base = {"BLAMEQUEUE_PROTOCOL": "redis"}
    cfg, _ = config_from_env({**base, "BLAMEQUEUE_REDIS_URL": "rediss://h:6380/0"})
    assert cfg["tls"] is True
    cfg, _ = config_from_env(
        {**base, "BLAMEQUEUE_REDIS_URL": "redis://h/0", "BLAMEQUEUE_REDIS_TLS": "true"}
    )
    assert cfg["tls"] is True
    cfg, _ = config_from_env(
        {
            **base,
            "BLAMEQUEUE_REDIS_URL": "redis://h/0",
            "BLAMEQUEUE_REDIS_USERNAME": "app",
            "BLAMEQUEUE_REDIS_PASSWORD": "pw",
            "BLAMEQUEUE_REDIS_KEY_PREFIX": "myapp",
        }
    )
    assert (cfg["tls"], cfg["username"], cfg["password"], cfg["key_prefix"]) == (
        False,
        "app",
        "pw",
        "myapp",
    )
