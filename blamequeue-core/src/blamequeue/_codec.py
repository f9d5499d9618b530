"""How payloads and errors are written at rest, one place for the whole library: JSON text,
sealed (:class:`SealedCodec`, the default) or plain (:class:`JsonCodec`, ``seal=False``).

**Places.** Every sealed value is bound to where it belongs (SPEC §6): the field it fills, the
queue and the job (or record) it belongs to, and for a payload the job's fixed metadata that
decides what runs (its flow and its ``meta``: task name, sealed context, batch, timeout).  A
place is bytes made by :func:`place`; the sealed text carries a digest of it, checked on
opening, so a value copied into another job, field or queue, or a job whose task name or
context was rewritten in the store, does not open.  With ``seal=False`` places are ignored:
nothing is authenticated then.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._accelerators import json_encoder
from ._validation import check_payload
from .errors import BadArgumentError, QueueError, SealKeyMissingError

__all__ = [
    "DEPENDENCY_FAILED",
    "LEASE_EXPIRED",
    "Codec",
    "JsonCodec",
    "SealedCodec",
    "Sealer",
    "compact_json",
    "dumps",
    "job_place",
    "payload_place",
    "place",
]

#: The last error the sweep gives a job whose lease expired.  Written by the backend for every
#: expired job at once, so it is stored as this plain text (it holds no user data) and read back
#: as is by every codec.
LEASE_EXPIRED = "lease expired"

#: How the last error of a flow job dead-lettered with a dependency starts (``FlowChild``'s
#: ``on_dependency_failure="fail"``).  The backend copies it from the dependency's
#: ``dependants_error`` in the step that kills the dependency, so it is plain text (names and
#: ids only, readable by design) and read back as is by every codec.
DEPENDENCY_FAILED = "dependency failed: "


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _first_encode(value: Any) -> str:
    """The first call picks the encoder for all later ones: the JSON encoder accelerator
    (:func:`~blamequeue._accelerators.json_encoder`: built once, it costs a third of
    ``_ENCODER.encode``, which builds its C encoder per call) when it fits this Python, else
    the encoder's own ``encode``.  Picked at first use, never at import."""
    global _encode
    _encode = json_encoder(_ENCODER) or _ENCODER.encode
    return _encode(value)


_encode: Callable[[Any], str] = _first_encode


def compact_json(value: Any) -> str:
    """Compact JSON text (``ensure_ascii=False``: text stays UTF-8; no NaN or Infinity); raises
    what ``json.dumps`` raises (a cycle: ``RecursionError``).  Backends reach it as
    :func:`blamequeue.abc.compact_json`."""
    return _encode(value)


def dumps(value: Any, max_bytes: int | None = None) -> str:
    """Compact JSON; raises ``queue/bad-payload`` for anything JSON cannot hold or would
    change (a key that is not a string), and ``queue/payload-too-large`` for a text over
    ``max_bytes`` (the backend's ``max_payload_bytes``; ``None``: no limit) bytes."""
    try:
        text = _encode(value)
        # A lone surrogate (what os.fsdecode makes of an undecodable name) passes json.dumps
        # but no store or sealer can hold it as UTF-8 (ASCII text, the most common, has none).
        if not text.isascii():
            text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadArgumentError(
            "queue/bad-payload",
            f"payload holds text that is not valid Unicode ({exc.reason} at position "
            f"{exc.start}); decode bytes properly (e.g. os.fsencode(...).decode('utf-8', "
            f"'replace')) before enqueueing.",
        ) from exc
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadArgumentError(
            "queue/bad-payload",
            f"payload must be JSON-serialisable (dict, list, str, int, float, bool, None; no "
            f"NaN/Infinity): {exc}. Convert it (e.g. a datetime to .isoformat(), a set to a "
            f"list, a model to a dict) before enqueueing.",
        ) from exc
    return check_payload(value, text, max_bytes)


def place(field: str, *names: str | None) -> bytes:
    """The place a sealed value belongs to: ``field`` and the names that identify its owner
    (queue, job id, record key...), each length-prefixed so no two lists give the same bytes."""
    return "\n".join([f"{len(name)}:{name}" if name else "0:" for name in (field, *names)]).encode()


def job_place(field: str, queue: str, job_id: str) -> bytes:
    """The place of one of a job's sealed fields other than its payload (``"error"``,
    ``"result"``, ``"progress"``, ``"context"``, ``"log"``)."""
    return place(field, queue, job_id)


def payload_place(queue: str, job_id: str, flow_id: str | None, meta: str | None) -> bytes:
    """The place of a job's payload: its queue and id, and the fixed metadata that decides
    what runs (flow membership, and ``meta`` exactly as stored: task name, sealed context,
    batch, timeout), so rewriting any of them in the store makes the payload refuse to open."""
    # place("payload", queue, job_id, flow_id, meta) spelled out: built for every job
    flow, rest = flow_id or "", meta or ""
    return (
        f"7:payload\n{len(queue)}:{queue}\n{len(job_id)}:{job_id}\n{len(flow)}:{flow}\n"
        f"{len(rest)}:{rest}"
    ).encode()


class Sealer(Protocol):
    """What a sealer registered through ``blamequeue_register_sealers`` builds.

    The registered value is a factory (typically the class) called with the keys, in order
    (the first one seals): ``factory(keys: Mapping[str, bytes]) -> Sealer``.  It seals and
    opens text; binding each value to its place is the codec's work, so any sealer gets it.
    A sealer may also offer ``seal_many(texts) -> list[str]``, used for batches.
    """

    def seal(self, text: str) -> str:
        """Seal ``text``; the result is stored verbatim (a str the store can hold as text)."""
        ...

    def unseal(self, envelope: str) -> str:
        """The text sealed in ``envelope``; raise ``QueueError("queue/unseal-failed", ...)``
        when it is not an envelope or fails authentication, and
        :class:`~blamequeue.errors.SealKeyMissingError` when it names a key it lacks."""
        ...


class Codec(Protocol):
    """Turns payloads, error texts and other values into the strings a backend stores, and
    back, each bound to its place (:func:`place`)."""

    sealed: bool

    def encode_payload(self, payload: Any, where: bytes) -> str: ...

    def seal_texts(self, texts: Sequence[str], places: Sequence[bytes]) -> list[str]:
        """Seal each (already JSON-encoded) text for its place, in order: a batch's payloads,
        cheaper than one by one."""
        ...

    def decode_payload(self, data: str, where: bytes) -> Any:
        """Raises ``queue/unseal-failed`` for a stored value it cannot read, and
        :class:`~blamequeue.errors.SealKeyMissingError` for one sealed with a key it lacks."""
        ...

    def encode_error(self, message: str, where: bytes) -> str: ...

    def decode_error(self, data: str | None, where: bytes) -> str | None:
        """Never raises: an unreadable error becomes a text saying so."""
        ...

    def seal_text(self, text: str, where: bytes) -> str:
        """Seal any text (a record's field, a context) for its place."""
        ...

    def open_text(self, data: str, where: bytes) -> str:
        """The text :meth:`seal_text` sealed for ``where``; raises as :meth:`decode_payload`."""
        ...


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise QueueError(
            "queue/unseal-failed",
            f"stored payload could not be decoded ({exc}); the row was altered outside "
            f"blamequeue, or it is sealed and this backend runs with seal=False",
        ) from exc


class JsonCodec:
    """Plain JSON at rest: ``seal=False``.  Places are ignored: nothing is authenticated."""

    sealed = False

    def encode_payload(self, payload: Any, where: bytes) -> str:
        return dumps(payload)

    def seal_texts(self, texts: Sequence[str], places: Sequence[bytes]) -> list[str]:
        return list(texts)

    def decode_payload(self, data: str, where: bytes) -> Any:
        return _loads(data)

    def encode_error(self, message: str, where: bytes) -> str:
        return message

    def decode_error(self, data: str | None, where: bytes) -> str | None:
        return data

    def seal_text(self, text: str, where: bytes) -> str:
        return text

    def open_text(self, data: str, where: bytes) -> str:
        return data


#: What starts the text inside every bound seal: a control character no JSON text and no
#: earlier (unbound) value starts with, the binding's version, then the place's digest.
_BOUND = "\x00p1:"
_DIGEST_CHARS = 22  # base64 of a 16-byte BLAKE2b digest, without padding


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _digest(where: bytes) -> str:
    """The URL-safe base64 of the place's 16-byte BLAKE2b digest, without padding: run for
    every value sealed or opened, so spelled with the one-call primitives."""
    raw = hashlib.blake2b(where, digest_size=16).digest()
    return binascii.b2a_base64(raw, newline=False)[:_DIGEST_CHARS].translate(_URLSAFE).decode()


def _field_of(where: bytes) -> str:
    """The field a place names (its first part), for messages."""
    size, _, rest = where.decode("utf-8", "replace").partition(":")
    return rest[: int(size)] if size.isdigit() else "value"


class SealedCodec:
    """JSON sealed by a :class:`Sealer`, each value bound to its place.

    A stored value that does not open raises ``queue/unseal-failed`` for a payload: the engine
    sends that job to the dead-letter queue, saying it was tampered with when the value opened
    but belongs elsewhere.  A value sealed with a key id this process lacks raises
    :class:`~blamequeue.errors.SealKeyMissingError`: not the job's fault, the engine releases it.
    Plain rows are refused because they carry no authentication; ``accept_unsealed=True`` reads
    them anyway, to migrate a store that ran with ``seal=False``.  Values sealed before seals
    were bound to their place are refused likewise unless ``accept_unbound=True`` (to drain a
    store written by an older version).
    """

    sealed = True

    def __init__(
        self, sealer: Sealer, *, accept_unsealed: bool = False, accept_unbound: bool = False
    ) -> None:
        self.sealer = sealer
        self.accept_unsealed = accept_unsealed
        self.accept_unbound = accept_unbound
        self._seal = sealer.seal
        # Optional on a sealer: one call for a batch (SecretBoxSealer draws its nonces at once).
        self._seal_many: Callable[[Sequence[str]], list[str]] | None = getattr(
            sealer, "seal_many", None
        )
        self._sealer_unseal = sealer.unseal

    def __repr__(self) -> str:
        return (
            f"SealedCodec({self.sealer!r}, accept_unsealed={self.accept_unsealed}, "
            f"accept_unbound={self.accept_unbound})"
        )

    def _unseal(self, data: str) -> str:
        try:
            return self._sealer_unseal(data)
        except QueueError:
            raise
        except Exception as exc:  # a third-party sealer's own error: still just unreadable
            raise QueueError(
                "queue/unseal-failed",
                f"the sealer {self.sealer!r} could not unseal the stored value "
                f"({type(exc).__name__})",
            ) from exc

    def seal_text(self, text: str, where: bytes) -> str:
        return self._seal(_BOUND + _digest(where) + text)

    def seal_texts(self, texts: Sequence[str], places: Sequence[bytes]) -> list[str]:
        bound = [_BOUND + _digest(where) + text for text, where in zip(texts, places, strict=True)]
        if self._seal_many is None or len(bound) < 2:  # a batch call costs more for one
            return [self._seal(text) for text in bound]
        return self._seal_many(bound)

    def open_text(self, data: str, where: bytes) -> str:
        return self._placed(self._unseal(data), where)

    def _placed(self, text: str, where: bytes) -> str:
        """``text`` (just unsealed) without its binding, which must name ``where``."""
        if not text.startswith(_BOUND):
            if self.accept_unbound:
                return text
            raise QueueError(
                "queue/unseal-failed",
                f"the stored {_field_of(where)} was sealed by an older blamequeue that did not "
                f"bind seals to their job; to read such rows while migrating, add "
                f'"accept_unbound": True to the seal configuration',
            )
        start = len(_BOUND)
        end = start + _DIGEST_CHARS
        if not hmac.compare_digest(text[start:end], _digest(where)):
            raise QueueError(
                "queue/unseal-failed",
                f"the stored {_field_of(where)} was tampered with: it opens with the key but "
                f"was sealed for another place (copied from another job, field or queue, or "
                f"the job's task name, context, flow or queue was rewritten in the store)",
            )
        return text[end:]

    def encode_payload(self, payload: Any, where: bytes) -> str:
        return self.seal_text(dumps(payload), where)

    def decode_payload(self, data: str, where: bytes) -> Any:
        try:
            text = self._unseal(data)
        except SealKeyMissingError:
            raise
        except QueueError:
            if self.accept_unsealed:
                return _loads(data)
            raise
        return _loads(self._placed(text, where))

    def encode_error(self, message: str, where: bytes) -> str:
        return self.seal_text(message, where)

    def decode_error(self, data: str | None, where: bytes) -> str | None:
        if data is None or data == LEASE_EXPIRED or data.startswith(DEPENDENCY_FAILED):
            return data
        try:
            text = self._unseal(data)
        except QueueError as exc:
            if self.accept_unsealed and not isinstance(exc, SealKeyMissingError):
                return data
            return f"{exc.code}: the last error could not be unsealed: {exc.message}"
        try:
            return self._placed(text, where)
        except QueueError as exc:
            return f"{exc.code}: the last error could not be unsealed: {exc.message}"
