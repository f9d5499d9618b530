"""Unique jobs (SPEC §11): ``enqueue(..., unique_key=..., unique_for=...)``.

While a job enqueued with a unique key is pending (delayed included) or inflight, another
enqueue on the same queue with the same key stores nothing and returns that job's id.  The key
is free again once the job leaves those states (done, dead, cancelled, purged) or ``unique_for``
seconds after its enqueue, whichever comes first.  The backend decides it in one atomic step
(:meth:`blamequeue.abc.Backend.enqueue_unique`); this module checks the arguments, refuses
backends that cannot, and audits a deduplicated enqueue.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs

from ._runtime import BackendRuntime
from ._validation import check_positive_seconds
from .abc import NewJob, Uniqueness
from .errors import BadArgumentError

__all__ = ["DEDUPLICATED", "UniqueClaim", "enqueue_unique", "refuse_in_batch", "unique_claim"]

#: The audit event of an enqueue that returned another job's id.
DEDUPLICATED = "system.queue.enqueue.deduplicated"

#: The longest unique key (characters): keys are identifiers, not payloads.
MAX_UNIQUE_KEY = 256

#: The longest ``unique_for`` (about 31 years): beyond it stores' expiry arithmetic (a Redis
#: TTL in milliseconds) overflows, and ``None`` says "while the job is live" anyway.
MAX_UNIQUE_FOR = 1e9


@attrs.frozen(kw_only=True)
class UniqueClaim:
    """A checked ``unique_key`` and ``unique_for`` (``None``: held while the job is live)."""

    key: str
    hold_for: float | None


def unique_claim(unique_key: Any, unique_for: Any) -> UniqueClaim | None:
    """Check ``enqueue``'s uniqueness arguments; ``None`` when no key was given."""
    if unique_key is None:
        if unique_for is not None:
            raise BadArgumentError(
                "queue/bad-argument",
                "unique_for needs a unique_key: pass unique_key=... to name what must not be "
                "enqueued twice, or drop unique_for",
            )
        return None
    if not isinstance(unique_key, str) or not unique_key.strip():
        raise BadArgumentError(
            "queue/bad-argument",
            f"unique_key must be a non-empty string (e.g. 'reindex:user-42'), got {unique_key!r}",
        )
    if len(unique_key) > MAX_UNIQUE_KEY:
        raise BadArgumentError(
            "queue/bad-argument",
            f"unique_key must be at most {MAX_UNIQUE_KEY} characters, got {len(unique_key)} "
            f"({unique_key[:40]!r}...): use an identifier, e.g. a hash of the payload",
        )
    hold_for = None if unique_for is None else check_positive_seconds(unique_for, "unique_for")
    if hold_for is not None and hold_for > MAX_UNIQUE_FOR:
        raise BadArgumentError(
            "queue/bad-argument",
            f"unique_for must be at most {MAX_UNIQUE_FOR:.0f} seconds, got {unique_for!r}; pass "
            f"unique_for=None to hold the key for as long as the job is pending or running",
        )
    return UniqueClaim(key=unique_key, hold_for=hold_for)


def refuse_in_batch(unique_key: Any, unique_for: Any) -> None:
    """``enqueue_many`` takes no unique key: one key cannot name several jobs."""
    if unique_key is not None or unique_for is not None:
        raise BadArgumentError(
            "queue/bad-argument",
            "enqueue_many does not take unique_key / unique_for (one key would name every job "
            "of the batch); call enqueue(..., unique_key=...) once per job that must be unique",
        )


def _key_digest(key: str) -> str:
    # Keys are often built from payload data (an e-mail address, an order number); the audit
    # trail carries no payload, so it gets a digest that still ties the events of one key.
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


async def enqueue_unique(runtime: BackendRuntime, job: NewJob, claim: UniqueClaim) -> str:
    """Store ``job`` unless a live job of its queue holds ``claim.key``; the id that holds it."""
    if not runtime.backend.capabilities.unique:
        raise runtime.unsupported(
            "queue/unique-unsupported",
            "cannot deduplicate jobs by unique_key; enqueue unique jobs on a backend whose "
            "capabilities include unique (e.g. 'local', 'redis', 'memory'), or enqueue without "
            "unique_key",
        )
    now = job.created_at
    hold_until = None if claim.hold_for is None else now + claim.hold_for
    holder = await runtime.call(
        "enqueue",
        lambda: Uniqueness.of(runtime.backend).enqueue_unique(
            job, unique_key=claim.key, hold_until=hold_until, now=now
        ),
    )
    if holder != job.id:
        await runtime.auditor.emit(
            DEDUPLICATED,
            backend=runtime.name,
            queue=job.queue,
            job_id=holder,
            trace_id=job.trace_id,
            classification=job.classification,
            data={"unique_key_digest": _key_digest(claim.key)},
        )
    return holder
