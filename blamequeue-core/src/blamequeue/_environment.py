"""``Queue.from_env``: one backend named ``default`` from ``BLAMEQUEUE_*`` variables (SPEC §7)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ._suggest import did_you_mean_protocol
from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import ConfigError

__all__ = ["config_from_env", "env_flag", "parse_seal_keys"]

PROTOCOLS = ("local", "redis", "sqs", "memory")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _error(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


def parse_seal_keys(value: str, where: str = "BLAMEQUEUE_SEAL_KEYS") -> dict[str, str]:
    """``"k2:<base64>,k1:<base64>"`` → ``{"k2": ..., "k1": ...}`` in order (the first writes)."""
    keys: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        kid, sep, key = part.partition(":")
        kid, key = kid.strip(), key.strip()
        if not sep or not kid or not key:
            raise _error(
                f"{where} must look like 'kid:base64key,kid2:base64key' (make a key with "
                f"`blamequeue keygen`); got an entry {part[:12]!r}..."
            )
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _error(f"{where}: key {kid!r} is not valid base64") from exc
        if len(raw) != 32:
            raise _error(f"{where}: key {kid!r} must be 32 bytes, got {len(raw)}")
        if kid in keys:
            raise _error(f"{where}: key id {kid!r} appears twice")
        keys[kid] = key
    if not keys:
        raise _error(f"{where} is set but holds no keys; unset it or add 'kid:base64key'")
    return keys


def env_flag(env: Mapping[str, str], name: str) -> bool | None:
    """The variable ``name`` of ``env`` as a yes/no (``None`` when unset); a value that is
    neither 1/true/yes/on nor 0/false/no/off is ``queue/invalid-config``."""
    raw = env.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _error(f"{name} must be 1/true or 0/false, got {raw!r}")


def config_from_env(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns ``(backend_config, queue_kwargs)``."""
    protocol = env.get("BLAMEQUEUE_PROTOCOL", "local").strip() or "local"
    if protocol not in PROTOCOLS:
        guess = did_you_mean_protocol(protocol, PROTOCOLS)
        raise _error(
            f"BLAMEQUEUE_PROTOCOL={protocol!r} is not a protocol{f' ({guess})' if guess else ''}; "
            f"use one of {', '.join(PROTOCOLS)}"
        )
    config: dict[str, Any] = {"protocol": protocol}
    if protocol == "local":
        if env.get("BLAMEQUEUE_LOCAL_PATH"):
            config["path"] = env["BLAMEQUEUE_LOCAL_PATH"]
    elif protocol == "redis":
        url = env.get("BLAMEQUEUE_REDIS_URL", "").strip()
        if not url:
            raise _error(
                "BLAMEQUEUE_PROTOCOL=redis needs BLAMEQUEUE_REDIS_URL "
                "(e.g. redis://127.0.0.1:6379/0)"
            )
        config["url"] = url
        for var, key in (
            ("BLAMEQUEUE_REDIS_USERNAME", "username"),
            ("BLAMEQUEUE_REDIS_PASSWORD", "password"),
            ("BLAMEQUEUE_REDIS_KEY_PREFIX", "key_prefix"),
        ):
            if env.get(var):
                config[key] = env[var]
        tls = env_flag(env, "BLAMEQUEUE_REDIS_TLS")
        config["tls"] = tls if tls is not None else url.startswith("rediss://")
    elif protocol == "sqs":
        url = env.get("BLAMEQUEUE_SQS_QUEUE_URL", "").strip()
        if not url:
            raise _error("BLAMEQUEUE_PROTOCOL=sqs needs BLAMEQUEUE_SQS_QUEUE_URL")
        config["queue_url"] = url
        for var, key in (
            ("BLAMEQUEUE_SQS_REGION", "region"),
            ("BLAMEQUEUE_SQS_ENDPOINT_URL", "endpoint_url"),
        ):
            if env.get(var):
                config[key] = env[var]

    kwargs: dict[str, Any] = {}
    if env.get("BLAMEQUEUE_SEAL_KEYS"):
        kwargs["seal"] = {"keys": parse_seal_keys(env["BLAMEQUEUE_SEAL_KEYS"])}
    raw_sweep = env.get("BLAMEQUEUE_SWEEP_INTERVAL")
    if raw_sweep is not None and raw_sweep.strip():
        try:
            sweep = float(raw_sweep)
        except ValueError as exc:
            raise _error(f"BLAMEQUEUE_SWEEP_INTERVAL must be seconds, got {raw_sweep!r}") from exc
        if not is_duration(sweep):
            raise _error(
                f"BLAMEQUEUE_SWEEP_INTERVAL must be >= 0 seconds and at most {MAX_SECONDS_TEXT}, "
                f"got {raw_sweep!r}"
            )
        kwargs["sweep_interval"] = sweep
    return config, kwargs
