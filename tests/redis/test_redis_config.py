"""RedisBackend options, the environment, the plugin and the seal-key rule: all checked at
construction, without a server."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio
from redis import exceptions as rx
from redis_helpers import SEAL

from blamequeue import Queue
from blamequeue._clock import SystemClock
from blamequeue._plugins import load_registry
from blamequeue.abc import BackendContext
from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError
from blamequeue_redis import RedisBackend
from blamequeue_redis._errors import DUPLICATE_JOB, map_redis_error
from blamequeue_redis._keys import DEFAULT_PREFIX

URL = "redis://127.0.0.1:6399/0"


def make_backend(**options: Any) -> RedisBackend:
    return RedisBackend(options, BackendContext(name="r", clock=SystemClock()))


def invalid(**options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        make_backend(**options)
    assert info.value.code == "queue/invalid-config"
    return info.value


def test_plugin_registers_protocol_redis() -> None:
    registration = load_registry().protocols["redis"]
    assert registration.value is RedisBackend


def test_capabilities() -> None:
    caps = RedisBackend.capabilities
    assert caps.dlq
    assert caps.flows
    assert caps.flow_policies
    assert not caps.cross_queue_flows  # a queue's keys live in one cluster slot
    assert caps.priority
    assert caps.delay
    assert caps.cross_process_wakeup
    assert caps.requires_seal_key
    assert not caps.store_clock
    assert caps.async_libraries == frozenset({"asyncio", "trio"})


def test_defaults() -> None:
    backend = make_backend(url=URL)
    assert backend.key_layout.prefix == DEFAULT_PREFIX == "blamequeue:queue"
    assert backend.transport is None  # construction does no I/O


def test_url_is_required() -> None:
    assert "'url' is required" in invalid().message


@pytest.mark.parametrize("url", ["", "http://localhost", "localhost:6379", 6379])
def test_url_must_be_a_redis_url(url: object) -> None:
    assert "'url'" in invalid(url=url).message


def test_a_mistyped_scheme_gets_a_did_you_mean() -> None:
    assert "(did you mean 'redis://'?)" in invalid(url="reds://localhost:6379").message


def test_unknown_option_is_refused_by_name() -> None:
    error = invalid(url=URL, pasword="x")
    assert "'pasword'" in error.message
    assert "'password'" in error.message


def test_tls_is_inferred_from_rediss() -> None:
    assert make_backend(url="rediss://example.com:6380")._config.tls
    assert not make_backend(url=URL)._config.tls


def test_tls_true_turns_the_url_into_rediss() -> None:
    backend = make_backend(url="redis://example.com:6380/1", tls=True)
    assert backend._config.url == "rediss://example.com:6380/1"


def test_tls_false_contradicting_rediss_is_refused() -> None:
    assert "'tls'" in invalid(url="rediss://example.com", tls=False).message


@pytest.mark.parametrize("prefix", ["", "has{brace", "has}brace", "ctl\x01", 5])
def test_key_prefix_must_be_plain_text_without_braces(prefix: object) -> None:
    assert "'key_prefix'" in invalid(url=URL, key_prefix=prefix).message


def test_reply_poll_defaults_to_200_us_and_takes_0_to_turn_it_off() -> None:
    assert make_backend(url=URL)._config.reply_poll_us == 200
    assert make_backend(url=URL, reply_poll_us=None)._config.reply_poll_us == 200
    assert make_backend(url=URL, reply_poll_us=0)._config.reply_poll_us == 0
    assert make_backend(client=redis.Redis(), reply_poll_us=50)._config.reply_poll_us == 50


@pytest.mark.parametrize("value", [-1, 10_001, 1.5, "200", True])
def test_reply_poll_must_be_whole_microseconds_within_bounds(value: object) -> None:
    message = invalid(url=URL, reply_poll_us=value).message
    assert "'reply_poll_us'" in message
    assert "from 0 (never poll) to 10000" in message


def test_client_must_be_a_redis_py_client() -> None:
    assert "'client'" in invalid(client=object()).message


def test_client_cannot_be_combined_with_connection_options() -> None:
    client = redis.Redis()
    error = invalid(client=client, url=URL, password="x")
    assert "'url'" in error.message
    assert "'password'" in error.message


def test_cluster_option_must_match_the_client() -> None:
    assert "'cluster'" in invalid(client=redis.asyncio.Redis(), cluster=True).message


def test_password_is_never_shown_in_messages() -> None:
    backend = make_backend(url="redis://user:s3cret@example.com:6379/0")
    assert "s3cret" not in backend._where
    assert "user:***@example.com:6379" in backend._where


def test_queue_refuses_to_start_without_a_seal_key() -> None:
    with pytest.raises(ConfigError) as info:
        Queue(backends={"r": {"protocol": "redis", "url": URL}})
    assert info.value.code == "queue/invalid-config"
    assert "keygen" in info.value.message
    assert "seal=False" in info.value.message


def test_queue_accepts_a_seal_key_or_an_explicit_opt_out() -> None:
    Queue(backends={"r": {"protocol": "redis", "url": URL, "seal": SEAL}})
    Queue(backends={"r": {"protocol": "redis", "url": URL}}, seal=False)


def test_from_env_reads_every_redis_variable() -> None:
    env = {
        "BLAMEQUEUE_PROTOCOL": "redis",
        "BLAMEQUEUE_REDIS_URL": "redis://example.com:6380/2",
        "BLAMEQUEUE_REDIS_USERNAME": "worker",
        "BLAMEQUEUE_REDIS_PASSWORD": "pw",
        "BLAMEQUEUE_REDIS_TLS": "true",
        "BLAMEQUEUE_REDIS_KEY_PREFIX": "shop:jobs",
        "BLAMEQUEUE_SEAL_KEYS": "k1:" + SEAL["keys"]["t1"],
    }
    queue = Queue.from_env(env)
    backend = queue._runtimes["default"].backend
    assert isinstance(backend, RedisBackend)
    config = backend._config
    assert config.url == "rediss://example.com:6380/2"
    assert (config.username, config.password, config.tls) == ("worker", "pw", True)
    assert backend.key_layout.prefix == "shop:jobs"


def test_from_env_infers_tls_from_the_url() -> None:
    env = {
        "BLAMEQUEUE_PROTOCOL": "redis",
        "BLAMEQUEUE_REDIS_URL": "rediss://example.com:6380/0",
        "BLAMEQUEUE_SEAL_KEYS": "k1:" + SEAL["keys"]["t1"],
    }
    backend = Queue.from_env(env)._runtimes["default"].backend
    assert isinstance(backend, RedisBackend)
    assert backend._config.tls


def test_from_env_needs_the_url() -> None:
    with pytest.raises(ConfigError) as info:
        Queue.from_env({"BLAMEQUEUE_PROTOCOL": "redis"})
    assert "BLAMEQUEUE_REDIS_URL" in info.value.message


# -- error mapping -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "exc",
    [
        rx.ConnectionError("Connection refused"),
        rx.TimeoutError("Timeout reading from socket"),
        rx.BusyLoadingError("Redis is loading the dataset in memory"),
        rx.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
        rx.ReadOnlyError("You can't write against a read only replica."),
        rx.ClusterDownError("The cluster is down"),
        rx.TryAgainError("TRYAGAIN"),
    ],
)
def test_temporary_failures_are_retryable(exc: Exception) -> None:
    error = map_redis_error(exc, where="w")
    assert isinstance(error, BackendUnavailableError)
    assert error.retryable


@pytest.mark.parametrize(
    "exc",
    [
        rx.AuthenticationError("invalid username-password pair or user is disabled."),
        rx.ResponseError("WRONGPASS invalid username-password pair or user is disabled."),
        rx.ResponseError("NOAUTH Authentication required."),
        rx.NoPermissionError("NOPERM this user has no permissions to access one of the keys"),
    ],
)
def test_credentials_and_permissions_are_configuration_errors(exc: Exception) -> None:
    error = map_redis_error(exc, where="w")
    assert isinstance(error, ConfigError)
    assert error.code == "queue/invalid-config"
    assert not error.retryable


def test_a_duplicate_job_id_is_a_bad_argument() -> None:
    error = map_redis_error(rx.ResponseError(f"{DUPLICATE_JOB} a job with id j exists"), where="w")
    assert isinstance(error, BadArgumentError)


def test_other_redis_errors_are_not_retried() -> None:
    error = map_redis_error(rx.ResponseError("ERR unknown command 'EVALSHA'"), where="w")
    assert type(error) is BackendUnavailableError
    assert error.code == "queue/backend-unavailable"
    assert not error.retryable
