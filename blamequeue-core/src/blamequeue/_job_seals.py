"""A job's sealed fields and their places (SPEC §6 "A seal is bound to its place").

A new job is built as a *draft*: a :class:`~blamequeue.abc.NewJob` whose payload is still its
JSON text.  :func:`seal_jobs` seals each draft's payload for its place once the job is final
(its id, queue, flow and ``meta``), right before the backend stores it; ``_build_jobs`` seals
inline when nothing changes the jobs after it.  The ``with_context`` values inside ``meta`` are
sealed for their job by :func:`meta_text` when the meta is written, so the stored meta holds
the task name and identifiers in clear and the context only as a sealed value, and the payload's
place covers that meta exactly: rewriting the task name or swapping a context makes the payload
refuse to open.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._codec import Codec, dumps, job_place, payload_place
from ._job_meta import CONTEXT_KEY, TASK_KEY
from .abc import NewJob, StoredJob
from .errors import BadArgumentError

__all__ = [
    "CONTEXT_META_KEY",
    "TASK_META_KEY",
    "error_place",
    "last_error_of",
    "meta_text",
    "open_context",
    "payload_place_of",
    "seal_jobs",
]

#: Keys of the job ``meta`` object that belong to the task layer (see :mod:`._job_meta`).
TASK_META_KEY = TASK_KEY
CONTEXT_META_KEY = CONTEXT_KEY


def meta_text(codec: Codec, fields: Mapping[str, Any], queue: str, job_id: str) -> str | None:
    """The stored ``meta`` of a new job: ``fields`` as JSON, its context sealed for the job."""
    if not fields:
        return None
    context = fields.get(CONTEXT_META_KEY)
    if context is not None and codec.sealed:
        sealed = codec.seal_text(_context_json(context), job_place("context", queue, job_id))
        fields = {**fields, CONTEXT_META_KEY: sealed}
    try:
        return json.dumps(fields)
    except (TypeError, ValueError) as exc:
        raise _bad_context(exc) from exc


def _context_json(context: Any) -> str:
    try:
        return dumps(context)
    except BadArgumentError as exc:
        raise _bad_context(exc) from exc


def _bad_context(exc: Exception) -> BadArgumentError:
    return BadArgumentError(
        "queue/bad-argument",
        f"with_context values must be JSON-serialisable (str, int, float, bool, None, "
        f"lists and dicts of those): {exc}",
    )


def open_context(codec: Codec, value: Any, stored: StoredJob) -> dict[str, Any]:
    """The ``with_context`` values of a stored job's meta (``{}`` for none).  A sealed one is
    opened for its job (raising ``queue/unseal-failed`` when it belongs to another)."""
    if isinstance(value, str):
        value = json.loads(codec.open_text(value, job_place("context", stored.queue, stored.id)))
    return value if isinstance(value, dict) else {}


def payload_place_of(job: NewJob | StoredJob) -> bytes:
    """Where a job's sealed payload belongs (:func:`._codec.payload_place`)."""
    return payload_place(job.queue, job.id, job.flow_id, job.meta)


def error_place(job: NewJob | StoredJob) -> bytes:
    """Where a job's sealed ``last_error`` belongs."""
    return job_place("error", job.queue, job.id)


def last_error_of(codec: Codec, job: StoredJob) -> str | None:
    """A stored job's ``last_error`` opened for its place (``None`` when it has none); never
    raises (:meth:`~._codec.Codec.decode_error`)."""
    if job.last_error is None:  # most jobs: no place to build
        return None
    return codec.decode_error(job.last_error, error_place(job))


def seal_jobs(codec: Codec, drafts: Sequence[NewJob]) -> list[NewJob]:
    """The drafts (payloads still JSON text) with their payloads sealed for their places."""
    if not codec.sealed:
        return list(drafts)
    sealed = codec.seal_texts(
        [draft.payload for draft in drafts], [payload_place_of(draft) for draft in drafts]
    )
    return [
        attrs.evolve(draft, payload=payload) for draft, payload in zip(drafts, sealed, strict=True)
    ]
