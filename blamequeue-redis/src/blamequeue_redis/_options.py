"""The ``redis`` backend's options: parsed and checked at construction, without any I/O.

This is where the Redis credentials enter (the ``password`` option, or a password in the URL or
its query string), so it is also where they are kept out of every text: :attr:`RedisOptions.
shown_url` is the URL with them replaced by ``***`` and is what every message names, the
``repr`` of :class:`RedisOptions` leaves them out, and :attr:`RedisOptions.secrets` lists them
for :func:`~blamequeue_redis._errors.map_redis_error` to scrub from what redis-py says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import attrs

from blamequeue._suggest import did_you_mean_protocol
from blamequeue.abc import OptionReader
from blamequeue_redis._keys import DEFAULT_PREFIX
from blamequeue_redis._transport import is_async_client, is_cluster_client, is_sync_client

__all__ = ["RedisOptions", "parse_options", "redact_url", "scrub"]

_KNOWN: Final = (
    "url",
    "username",
    "password",
    "tls",
    "key_prefix",
    "client",
    "cluster",
    "reply_poll_us",
    "trio_transport",
)
_SCHEMES: Final = ("redis", "rediss", "unix")
_MAX_PREFIX: Final = 200
#: Default of ``reply_poll_us``: a loopback reply (a script of a few jobs) comes within it.
REPLY_POLL_US: Final = 200
_MAX_REPLY_POLL_US: Final = 10_000
#: The choices of ``trio_transport`` and what each does.
TRIO_TRANSPORTS: Final = {
    "streams": "RESP over anyio streams, the default",
    "threads": "redis-py's sync client in worker threads",
}


@attrs.frozen(kw_only=True)
class RedisOptions:
    url: str | None = attrs.field(repr=False)
    """The server URL with the scheme TLS asks for (``rediss://`` when ``tls``).  It may hold
    the password: never put it in a message, use :attr:`shown_url`."""
    shown_url: str | None
    """:attr:`url` with its password (and any secret query parameter) replaced by ``***``."""
    username: str | None
    password: str | None = attrs.field(repr=False)
    tls: bool
    key_prefix: str
    client: Any | None
    """A caller's redis-py client (never closed by the backend)."""
    cluster: bool | None
    """True: Redis Cluster; False: one server; None: ask the server at ``open()``."""
    reply_poll_us: int = REPLY_POLL_US
    """On asyncio: how long a call may poll its socket for the reply before it sleeps in the
    event loop (0: never)."""
    trio_transport: str = "streams"
    """On trio, for a single server reached through ``url``: ``"streams"`` (the backend's own
    RESP over anyio streams) or ``"threads"`` (redis-py's sync client in worker threads)."""
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)
    """Every credential given (as written and percent-decoded), longest first: scrubbed from
    foreign error texts (:func:`scrub`)."""


# Query parameters redis-py passes on to the connection that carry a credential.
_SECRET_PARAMETERS: Final = ("password", "passwd", "pass", "pwd", "token", "secret", "auth")
_HIDDEN: Final = "***"


def _is_secret_parameter(name: str) -> bool:
    lowered = unquote(name).lower()
    return any(word in lowered for word in _SECRET_PARAMETERS)


def _url_secrets(url: str) -> list[str]:
    """The credentials written in ``url``: the password of its user info and the values of
    query parameters named like a password or token."""
    found: list[str] = []
    scheme_rest = url.split("://", 1)
    rest = scheme_rest[-1]
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        user, colon, password = userinfo.partition(":")
        found.append(password if colon else user)  # a lone user info may be a token
    query = rest.partition("?")[2].partition("#")[0]
    for pair in query.split("&"):
        name, equals, value = pair.partition("=")
        if equals and value and _is_secret_parameter(name):
            found.append(value)
    return found


def redact_url(url: str) -> str:
    """``url`` as messages may show it: the password of its user info and every secret query
    parameter replaced by ``***``.  The user name before a password is kept (an ACL user is not
    a secret); user info without a password is hidden whole, since it may be a token."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    netloc, tail = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{_HIDDEN}@{hostport}" if colon else f"{_HIDDEN}@{hostport}"
    before, question, query = tail.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, equals, value = pair.partition("=")
            hidden = equals and value and _is_secret_parameter(name)
            pairs.append(f"{name}={_HIDDEN}" if hidden else pair)
        tail = f"{before}?{'&'.join(pairs)}{hash_}{fragment}"
    return f"{scheme}{sep}{netloc}{tail}"


def _secrets_of(*given: str | None) -> tuple[str, ...]:
    found: set[str] = set()
    for secret in given:
        if secret:
            found.update({secret, unquote(secret)})
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every one of ``secrets`` (longest first) replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, _HIDDEN)
    return text


def _key_prefix(read: OptionReader) -> str:
    prefix = read.raw("key_prefix")
    if prefix is None:
        return DEFAULT_PREFIX
    if not isinstance(prefix, str) or not prefix or len(prefix) > _MAX_PREFIX:
        raise read.invalid(
            f"option 'key_prefix' must be a non-empty string of at most {_MAX_PREFIX} "
            f"characters, got {prefix!r}"
        )
    if "{" in prefix or "}" in prefix or any(ord(c) < 32 for c in prefix):
        raise read.invalid(
            f"option 'key_prefix' may not hold '{{', '}}' or control characters (the queue "
            f"name is the key's cluster hash tag), got {prefix!r}"
        )
    return prefix


def _url(read: OptionReader, raw: object, tls: bool | None) -> tuple[str, bool]:
    if not isinstance(raw, str) or not raw.strip():
        shown = type(raw).__name__ if isinstance(raw, str) or raw is None else repr(raw)
        raise read.invalid(
            f"option 'url' must be a Redis URL like 'redis://127.0.0.1:6379/0' "
            f"(or 'rediss://' for TLS), got {shown}"
        )
    url = raw.strip()
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number raises ValueError here
    except ValueError as exc:
        reason = scrub(str(exc), _secrets_of(*_url_secrets(url)))
        raise read.invalid(f"option 'url' is not a valid URL ({reason}): {shown!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        guess = did_you_mean_protocol(f"{scheme}://", _SCHEMES)
        raise read.invalid(
            f"option 'url' must start with redis://, rediss:// (TLS) or unix://, got {shown!r}"
            + (f" ({guess})" if guess else "")
        )
    if tls is None:
        return url, scheme == "rediss"
    if tls and scheme == "unix":
        raise read.invalid("option 'tls' cannot be used with a unix:// socket URL")
    if not tls and scheme == "rediss":
        raise read.invalid(
            "option 'tls' is false but the URL is rediss:// (TLS); drop one of the two"
        )
    if tls and scheme == "redis":
        url = "rediss" + url[len("redis") :]
    return url, tls


def parse_options(options: Mapping[str, Any]) -> RedisOptions:
    """Check ``options`` and return them typed; raise ``queue/invalid-config`` naming the fault."""
    read = OptionReader(options, backend="redis backend", known=_KNOWN)
    username = read.text("username")
    password = read.text("password")
    tls = read.flag("tls", None, words=True)
    cluster = read.flag("cluster", None, words=True)
    prefix = _key_prefix(read)
    reply_poll_us = read.integer(
        "reply_poll_us",
        REPLY_POLL_US,
        low=0,
        high=_MAX_REPLY_POLL_US,
        meaning=f"of microseconds from 0 (never poll) to {_MAX_REPLY_POLL_US}",
    )

    trio_transport = read.choice("trio_transport", "streams", TRIO_TRANSPORTS)

    client = read.raw("client")
    if client is not None:
        if not (is_async_client(client) or is_sync_client(client)):
            raise read.invalid(
                f"option 'client' must be a redis-py client (redis.Redis, "
                f"redis.asyncio.Redis or their RedisCluster), got {type(client).__name__}"
            )
        given = [name for name in ("url", "username", "password", "tls") if options.get(name)]
        if given:
            raise read.invalid(
                f"option 'client' cannot be combined with {', '.join(map(repr, given))}: "
                f"the client you pass is already connected and configured by you"
            )
        is_cluster = is_cluster_client(client)
        if cluster is not None and cluster != is_cluster:
            raise read.invalid(
                f"option 'cluster' is {cluster} but the client given is "
                f"{'a' if is_cluster else 'not a'} cluster client; drop 'cluster'"
            )
        return RedisOptions(
            url=None,
            shown_url=None,
            username=None,
            password=None,
            tls=False,
            key_prefix=prefix,
            client=client,
            cluster=is_cluster,
            reply_poll_us=reply_poll_us,
            trio_transport=trio_transport,
        )

    if options.get("url") is None:
        raise read.invalid(
            "option 'url' is required, e.g. {'protocol': 'redis', 'url': "
            "'redis://127.0.0.1:6379/0'} (or pass a redis-py client as 'client')"
        )
    url, tls = _url(read, options["url"], tls)
    if cluster and urlsplit(url).scheme.lower() == "unix":
        raise read.invalid("a Redis Cluster cannot be reached through a unix:// socket URL")
    return RedisOptions(
        url=url,
        shown_url=redact_url(url),
        username=username,
        password=password,
        tls=tls,
        key_prefix=prefix,
        client=None,
        cluster=cluster,
        reply_poll_us=reply_poll_us,
        trio_transport=trio_transport,
        secrets=_secrets_of(password, *_url_secrets(url)),
    )
