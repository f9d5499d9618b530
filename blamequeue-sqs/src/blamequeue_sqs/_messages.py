"""How a job travels as an SQS message: a JSON body plus a few message attributes.

The body holds everything the job needs (``payload``, ``meta``, ``max_attempts``, times,
``classification``, ``trace_id``; the payload is already sealed by the core), written with
``ensure_ascii`` so any text is valid in an SQS message.  Message attributes hold what must be
readable without parsing the body, and stay under SQS's limit of 10 per message:

* ``bq-job-id`` (String): the job id, on every message (``dlq_retry`` finds a job by it);
* ``bq-park-until`` (Number): on a *placeholder*, a message standing in for a job delayed
  beyond SQS's 900 s: it is re-parked until this time and never handed to a handler;
* ``bq-last-error`` (String): on a dead-letter copy, the sealed last error.

A dead-letter copy's body also carries ``attempts`` and ``failed_at``; a job sent again to its
queue (a release) carries ``attempts_before``, the attempts its earlier messages used.  Every
message built here is an entry of a ``SendMessageBatch`` (without its ``Id``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from blamequeue.abc import NewJob, StoredJob

__all__ = [
    "ATTR_ERROR",
    "ATTR_JOB_ID",
    "ATTR_PARK_UNTIL",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_BATCH_ENTRIES",
    "MAX_DELAY_SECONDS",
    "MAX_VISIBILITY_SECONDS",
    "Decoded",
    "attempts_of",
    "body_of",
    "ceil_seconds",
    "chunk_entries",
    "dead_entry",
    "decode",
    "encode_body",
    "entry_size",
    "fresh_entry",
    "group_id",
    "job_attributes",
    "number_attribute",
    "receipt_seconds_left",
    "receive_request",
    "resend_fields",
    "stored_job",
    "string_attribute",
]

ATTR_JOB_ID: Final = "bq-job-id"
ATTR_PARK_UNTIL: Final = "bq-park-until"
ATTR_ERROR: Final = "bq-last-error"
FORMAT_VERSION: Final = 1

MAX_DELAY_SECONDS = 900
"""SQS's longest ``DelaySeconds``; a longer delay is sent as a placeholder (re-parked)."""
MAX_VISIBILITY_SECONDS = 43_200
"""SQS's longest visibility timeout (12 h) for one receipt."""
MAX_BATCH_ENTRIES: Final = 10
DEFAULT_MAX_MESSAGE_BYTES: Final = 262_144
"""SQS's message size limit unless the queue's MaximumMessageSize says less."""

# The system attributes decode() reads: every receive asks for them.
_SYSTEM_ATTRIBUTES: Final = ("ApproximateReceiveCount", "SentTimestamp")

# MessageGroupId: 1-128 alphanumeric or punctuation characters.
_GROUP_ID: Final = re.compile(r"[!-~]{1,128}")


def group_id(queue: str, job_id: str, mode: str) -> str:
    """The FIFO ``MessageGroupId`` of a job: its queue name (FIFO order per queue), or its own
    id (``message_group="job"``: no order, full parallelism).  A queue name SQS would refuse
    (spaces, non-ASCII) is replaced by a stable digest of it."""
    if mode == "job":
        return job_id
    if _GROUP_ID.fullmatch(queue):
        return queue
    return "q-" + hashlib.sha256(queue.encode("utf-8")).hexdigest()[:40]


def receive_request(url: str, *, want: int, visibility: int, wait: int) -> dict[str, Any]:
    """The parameters of a ReceiveMessage of up to ``want`` messages of ``url``, hidden
    ``visibility`` seconds, waiting up to ``wait`` seconds for one: with every attribute
    :func:`decode` reads."""
    return {
        "QueueUrl": url,
        "MaxNumberOfMessages": want,
        "VisibilityTimeout": visibility,
        "WaitTimeSeconds": wait,
        "MessageAttributeNames": ["All"],
        "AttributeNames": list(_SYSTEM_ATTRIBUTES),
    }


def body_of(job: NewJob) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "id": job.id,
        "queue": job.queue,
        "payload": job.payload,
        "max_attempts": job.max_attempts,
        "created_at": job.created_at,
        "available_at": job.available_at,
    }
    for key in ("classification", "trace_id", "meta"):
        value = getattr(job, key)
        if value is not None:
            body[key] = value
    return body


def encode_body(body: Mapping[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"))


def string_attribute(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number_attribute(value: float) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": repr(float(value))}


def job_attributes(job_id: str) -> dict[str, dict[str, str]]:
    """The message attributes of every message of a job: its id (``bq-job-id``)."""
    return {ATTR_JOB_ID: string_attribute(job_id)}


def entry_size(entry: Mapping[str, Any]) -> int:
    """What SQS counts towards its message size limit: body plus attribute names, types and
    values, in UTF-8 bytes."""
    size = len(str(entry["MessageBody"]).encode("utf-8"))
    for name, attribute in entry.get("MessageAttributes", {}).items():
        size += len(name.encode("utf-8")) + len(attribute["DataType"].encode("utf-8"))
        size += len(attribute.get("StringValue", "").encode("utf-8"))
    return size


def chunk_entries(
    entries: Sequence[dict[str, Any]], max_bytes: int
) -> Iterator[list[dict[str, Any]]]:
    """Batches of at most 10 entries whose sizes add up to at most ``max_bytes`` (SQS's limit
    on one batch request's total payload)."""
    chunk: list[dict[str, Any]] = []
    total = 0
    for entry in entries:
        size = entry_size(entry)
        if chunk and (len(chunk) == MAX_BATCH_ENTRIES or total + size > max_bytes):
            yield chunk
            chunk, total = [], 0
        chunk.append(entry)
        total += size
    if chunk:
        yield chunk


def ceil_seconds(seconds: float) -> int:
    """SQS counts whole seconds: a duration rounds up, never down (a lease is not cut short)."""
    if seconds <= 0:
        return 0
    return math.ceil(round(seconds, 6))


def receipt_seconds_left(received_at: float, now: float) -> int:
    """The longest visibility timeout SQS still takes for a receipt made at ``received_at``:
    one receipt holds its message 12 h at most (a second kept in hand for rounding)."""
    return max(0, MAX_VISIBILITY_SECONDS - ceil_seconds(now - received_at) - 1)


@attrs.frozen(kw_only=True)
class Decoded:
    """A blamequeue message as received."""

    body: Mapping[str, Any]
    job_id: str
    queue: str
    receive_count: int
    park_until: float | None
    last_error: str | None
    sent_at: float | None


def _attribute(message: Mapping[str, Any], name: str) -> str | None:
    attribute = message.get("MessageAttributes", {}).get(name)
    if not isinstance(attribute, Mapping):
        return None
    value = attribute.get("StringValue")
    return value if isinstance(value, str) else None


def decode(message: Mapping[str, Any]) -> Decoded | None:
    """The job a received message carries, or ``None`` for a message blamequeue did not write."""
    try:
        body = json.loads(message["Body"])
    except (KeyError, TypeError, ValueError):
        return None
    if (
        not isinstance(body, dict)
        or body.get("v") != FORMAT_VERSION
        or not isinstance(body.get("id"), str)
        or not isinstance(body.get("queue"), str)
        or not isinstance(body.get("payload"), str)
    ):
        return None
    system = message.get("Attributes", {})
    try:
        receive_count = int(system.get("ApproximateReceiveCount", 1))
    except (TypeError, ValueError):
        receive_count = 1
    sent_at: float | None = None
    try:
        sent_at = int(system["SentTimestamp"]) / 1000
    except (KeyError, TypeError, ValueError):
        sent_at = None
    park = _attribute(message, ATTR_PARK_UNTIL)
    try:
        park_until = float(park) if park is not None else None
    except ValueError:
        park_until = None
    return Decoded(
        body=body,
        job_id=body["id"],
        queue=body["queue"],
        receive_count=receive_count,
        park_until=park_until,
        last_error=_attribute(message, ATTR_ERROR),
        sent_at=sent_at,
    )


def _float(body: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = body.get(key, default)
    return float(value) if isinstance(value, int | float) else default


def _text(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) else None


def stored_job(
    decoded: Decoded,
    *,
    state: Any,
    attempts: int,
    last_error: str | None = None,
    finished_at: float | None = None,
) -> StoredJob:
    body = decoded.body
    max_attempts = body.get("max_attempts")
    return StoredJob(
        id=decoded.job_id,
        queue=decoded.queue,
        state=state,
        payload=body["payload"],
        priority=0,
        attempts=attempts,
        max_attempts=max_attempts if isinstance(max_attempts, int) and max_attempts > 0 else 1,
        created_at=_float(body, "created_at"),
        available_at=_float(body, "available_at"),
        classification=_text(body, "classification"),
        trace_id=_text(body, "trace_id"),
        last_error=last_error,
        meta=_text(body, "meta"),
        finished_at=finished_at,
    )


def attempts_of(decoded: Decoded, receive_count: int | None = None) -> int:
    """The job's attempts: SQS's receive count, plus attempts made on earlier messages of the
    same job (a message re-sent when a worker released it at shutdown)."""
    before = decoded.body.get("attempts_before", 0)
    count = decoded.receive_count if receive_count is None else receive_count
    return count + (before if isinstance(before, int) and before > 0 else 0)


def resend_fields(
    entry: dict[str, Any], decoded: Decoded | None, *, fifo: bool, message_group: str
) -> dict[str, Any]:
    """``entry`` with what a FIFO queue needs of a message sent again (``decoded``, or
    ``None`` for a message blamequeue did not write): its group, and a fresh deduplication
    id, so SQS does not drop it as a copy of the original."""
    if fifo:
        if decoded is not None:
            entry["MessageGroupId"] = group_id(decoded.queue, decoded.job_id, message_group)
            entry["MessageDeduplicationId"] = f"{decoded.job_id}.{secrets.token_hex(8)}"
        else:
            entry["MessageGroupId"] = "foreign"
            entry["MessageDeduplicationId"] = secrets.token_hex(16)
    return entry


def dead_entry(
    decoded: Decoded,
    *,
    attempts: int,
    at: float,
    error: str | None,
    fifo: bool,
    message_group: str,
) -> dict[str, Any]:
    """The dead-letter copy of a job: ``attempts`` and ``failed_at`` in its body, the sealed
    ``error`` in the ``bq-last-error`` attribute."""
    body = {key: value for key, value in decoded.body.items() if key != "attempts_before"}
    body["attempts"] = attempts
    body["failed_at"] = at
    attributes = job_attributes(decoded.job_id)
    if error is not None:
        attributes[ATTR_ERROR] = string_attribute(error)
    entry = {"MessageBody": encode_body(body), "MessageAttributes": attributes}
    return resend_fields(entry, decoded, fifo=fifo, message_group=message_group)


def delay_entry(entry: dict[str, Any], *, delay: int, due: float) -> dict[str, Any]:
    """Hold a standard queue's new message back ``delay`` whole seconds (due at ``due``): its
    DelaySeconds, or beyond SQS's 900 s a placeholder that leases re-park until due."""
    if delay > MAX_DELAY_SECONDS:
        entry["MessageAttributes"][ATTR_PARK_UNTIL] = number_attribute(due)
        entry["DelaySeconds"] = MAX_DELAY_SECONDS
    elif delay > 0:
        entry["DelaySeconds"] = delay
    return entry


def fresh_entry(
    decoded: Decoded, *, attempts_before: int, fifo: bool, message_group: str
) -> dict[str, Any]:
    """A new message for a job going back to its queue (fresh receive count)."""
    body = {
        key: value
        for key, value in decoded.body.items()
        if key not in ("attempts", "failed_at", "attempts_before")
    }
    if attempts_before > 0:
        body["attempts_before"] = attempts_before
    entry = {
        "MessageBody": encode_body(body),
        "MessageAttributes": job_attributes(decoded.job_id),
    }
    return resend_fields(entry, decoded, fifo=fifo, message_group=message_group)
