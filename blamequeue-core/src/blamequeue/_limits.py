"""Fleet-wide limits: a rate limit per queue shared by every worker, and per-group concurrency.

The core only checks arguments and picks the lease call; the limits themselves are enforced
inside the backend's atomic lease (:meth:`blamequeue.abc.Backend.lease_limited`), against
state kept in the store (a token bucket per queue, the inflight jobs of each group), so any
number of processes together stay within them.  The limits travel with each lease of a
consumer (or tick) that was given them, the way a worker is configured, rather than being
stored per queue: consumers without limits keep the plain lease untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ._models import RateLimit
from ._runtime import BackendRuntime
from ._validation import check_positive_int
from .abc import GroupLimits, Lease, LeaseLimits, RateLimits
from .errors import BadArgumentError, UnsupportedError

__all__ = ["check_group_key", "lease_call", "parse_lease_limits"]

#: Group keys are identifiers (a tenant, an account), not payloads.
MAX_GROUP_KEY = 256


def check_group_key(value: Any, runtime: BackendRuntime) -> str | None:
    """``None`` or a non-empty string of at most 256 characters, on a backend that can limit
    groups (else ``queue/limits-unsupported``: a key it would silently ignore is refused)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_GROUP_KEY:
        raise BadArgumentError(
            "queue/bad-argument",
            f"group_key must be a non-empty string of at most {MAX_GROUP_KEY} characters "
            f"(a tenant or account id, say), got {value!r:.60}",
        )
    if not runtime.backend.capabilities.group_limits:
        raise _unsupported(runtime, "group_key")
    return value


def parse_lease_limits(
    runtime: BackendRuntime,
    global_rate_limit: RateLimit | Mapping[str, Any] | None,
    group_concurrency: Any,
) -> LeaseLimits | None:
    """The checked limits of a consumer or tick, or ``None`` when it has none."""
    rate = RateLimit.coerce(global_rate_limit, "global_rate_limit")
    groups = None
    if group_concurrency is not None:
        groups = check_positive_int(group_concurrency, "group_concurrency")
    if rate is None and groups is None:
        return None
    caps = runtime.backend.capabilities
    if rate is not None and not caps.global_rate_limit:
        raise _unsupported(runtime, "global_rate_limit")
    if groups is not None and not caps.group_limits:
        raise _unsupported(runtime, "group_concurrency")
    return LeaseLimits(
        rate_max=None if rate is None else rate.max,
        rate_per_seconds=None if rate is None else float(rate.per_seconds),
        group_concurrency=groups,
    )


def lease_call(
    runtime: BackendRuntime,
    queue: str,
    *,
    limit: int,
    now: float,
    lease_seconds: float,
    limits: LeaseLimits | None,
) -> Callable[[], Awaitable[list[Lease]]]:
    """The backend call that leases for a consumer or tick: the plain lease without limits."""
    backend = runtime.backend
    if limits is None:
        return lambda: backend.lease(queue, limit=limit, now=now, lease_seconds=lease_seconds)
    limited = RateLimits.of(backend) if limits.rate_max is not None else GroupLimits.of(backend)
    return lambda: limited.lease_limited(
        queue, limit=limit, now=now, lease_seconds=lease_seconds, limits=limits
    )


def _unsupported(runtime: BackendRuntime, what: str) -> UnsupportedError:
    return runtime.unsupported(
        "queue/limits-unsupported",
        f"cannot enforce {what} across processes; use a backend whose capabilities include "
        f"global_rate_limit and group_limits (e.g. 'local', 'redis'), or a per-consumer "
        f"rate_limit",
    )
