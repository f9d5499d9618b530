"""The ``redis`` backend's options: parsed and checked at construction, without any I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from blamequeue.errors import ConfigError
from blamequeue_redis._keys import DEFAULT_PREFIX
from blamequeue_redis._transport import is_async_client, is_cluster_client, is_sync_client

__all__ = ["RedisOptions", "parse_options"]

_KNOWN: Final = (
    "url",
    "username",
    "password",
    "tls",
    "key_prefix",
    "client",
    "cluster",
    "reply_poll_us",
)
_SCHEMES: Final = ("redis", "rediss", "unix")
_MAX_PREFIX: Final = 200
#: Default of ``reply_poll_us``: a loopback reply (a script of a few jobs) comes within it.
REPLY_POLL_US: Final = 200
_MAX_REPLY_POLL_US: Final = 10_000


@attrs.frozen(kw_only=True)
class RedisOptions:
    url: str | None
    """The server URL with the scheme TLS asks for (``rediss://`` when ``tls``)."""
    username: str | None
    password: str | None
    tls: bool
    key_prefix: str
    client: Any | None
    """A caller's redis-py client (never closed by the backend)."""
    cluster: bool | None
    """True: Redis Cluster; False: one server; None: ask the server at ``open()``."""
    reply_poll_us: int = REPLY_POLL_US
    """On asyncio: how long a call may poll its socket for the reply before it sleeps in the
    event loop (0: never)."""


def _invalid(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", f"redis backend: {message}")


def _optional_text(options: Mapping[str, Any], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _invalid(f"option {name!r} must be a non-empty string, got {type(value).__name__}")
    return value


def _flag(options: Mapping[str, Any], name: str) -> bool | None:
    value = options.get(name)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "0", "false"):
        return value.strip().lower() in ("1", "true")
    raise _invalid(f"option {name!r} must be true or false, got {value!r}")


def _reply_poll_us(options: Mapping[str, Any]) -> int:
    value = options.get("reply_poll_us")
    if value is None:
        return REPLY_POLL_US
    if isinstance(value, bool) or not isinstance(value, int) or not (
        0 <= value <= _MAX_REPLY_POLL_US
    ):
        raise _invalid(
            f"option 'reply_poll_us' must be a whole number of microseconds from 0 (never poll) "
            f"to {_MAX_REPLY_POLL_US}, got {value!r}"
        )
    return value


def _key_prefix(options: Mapping[str, Any]) -> str:
    prefix = options.get("key_prefix")
    if prefix is None:
        return DEFAULT_PREFIX
    if not isinstance(prefix, str) or not prefix or len(prefix) > _MAX_PREFIX:
        raise _invalid(
            f"option 'key_prefix' must be a non-empty string of at most {_MAX_PREFIX} "
            f"characters, got {prefix!r}"
        )
    if "{" in prefix or "}" in prefix or any(ord(c) < 32 for c in prefix):
        raise _invalid(
            f"option 'key_prefix' may not hold '{{', '}}' or control characters (the queue "
            f"name is the key's cluster hash tag), got {prefix!r}"
        )
    return prefix


def _url(raw: object, tls: bool | None) -> tuple[str, bool]:
    if not isinstance(raw, str) or not raw.strip():
        raise _invalid(
            f"option 'url' must be a Redis URL like 'redis://127.0.0.1:6379/0' "
            f"(or 'rediss://' for TLS), got {raw!r}"
        )
    url = raw.strip()
    scheme = urlsplit(url).scheme.lower()
    if scheme not in _SCHEMES:
        raise _invalid(
            f"option 'url' must start with redis://, rediss:// (TLS) or unix://, got {url!r}"
        )
    if tls is None:
        return url, scheme == "rediss"
    if tls and scheme == "unix":
        raise _invalid("option 'tls' cannot be used with a unix:// socket URL")
    if not tls and scheme == "rediss":
        raise _invalid("option 'tls' is false but the URL is rediss:// (TLS); drop one of the two")
    if tls and scheme == "redis":
        url = "rediss" + url[len("redis") :]
    return url, tls


def parse_options(options: Mapping[str, Any]) -> RedisOptions:
    """Check ``options`` and return them typed; raise ``queue/invalid-config`` naming the fault."""
    unknown = sorted(str(key) for key in options if key not in _KNOWN)
    if unknown:
        raise _invalid(
            f"unknown option(s) {', '.join(map(repr, unknown))}; "
            f"the redis backend accepts {', '.join(map(repr, _KNOWN))}"
        )
    username = _optional_text(options, "username")
    password = _optional_text(options, "password")
    tls = _flag(options, "tls")
    cluster = _flag(options, "cluster")
    prefix = _key_prefix(options)
    reply_poll_us = _reply_poll_us(options)

    client = options.get("client")
    if client is not None:
        if not (is_async_client(client) or is_sync_client(client)):
            raise _invalid(
                f"option 'client' must be a redis-py client (redis.Redis, "
                f"redis.asyncio.Redis or their RedisCluster), got {type(client).__name__}"
            )
        given = [name for name in ("url", "username", "password", "tls") if options.get(name)]
        if given:
            raise _invalid(
                f"option 'client' cannot be combined with {', '.join(map(repr, given))}: "
                f"the client you pass is already connected and configured by you"
            )
        is_cluster = is_cluster_client(client)
        if cluster is not None and cluster != is_cluster:
            raise _invalid(
                f"option 'cluster' is {cluster} but the client given is "
                f"{'a' if is_cluster else 'not a'} cluster client; drop 'cluster'"
            )
        return RedisOptions(
            url=None,
            username=None,
            password=None,
            tls=False,
            key_prefix=prefix,
            client=client,
            cluster=is_cluster,
            reply_poll_us=reply_poll_us,
        )

    if options.get("url") is None:
        raise _invalid(
            "option 'url' is required, e.g. {'protocol': 'redis', 'url': "
            "'redis://127.0.0.1:6379/0'} (or pass a redis-py client as 'client')"
        )
    url, tls = _url(options["url"], tls)
    if cluster and urlsplit(url).scheme.lower() == "unix":
        raise _invalid("a Redis Cluster cannot be reached through a unix:// socket URL")
    return RedisOptions(
        url=url,
        username=username,
        password=password,
        tls=tls,
        key_prefix=prefix,
        client=None,
        cluster=cluster,
        reply_poll_us=reply_poll_us,
    )
