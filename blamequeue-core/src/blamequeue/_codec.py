"""How payloads and errors are written at rest, one place for the whole library: JSON text,
sealed (:class:`SealedCodec`, the default) or plain (:class:`JsonCodec`, ``seal=False``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .errors import BadArgumentError, QueueError

if TYPE_CHECKING:
    from ._sealing import Sealer

__all__ = ["Codec", "JsonCodec", "SealedCodec", "compact_json", "dumps"]


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _one_encoder() -> Callable[[Any], str]:
    """One encoder for every payload and every row a backend ships as JSON.  json.dumps with
    options builds a new one per call, and JSONEncoder.encode builds its C encoder per call too:
    built once here (without the circular reference check, whose price is a dict per call: a
    cycle still fails, as RecursionError), it costs a third.  Where the C accelerator is
    missing, the encoder's own encode."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    chunks = make(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    return lambda value: "".join(chunks(value, 0))


#: Compact JSON text (``ensure_ascii=False``: text stays UTF-8; no NaN or Infinity); raises
#: what ``json.dumps`` raises.  Backends reach it as :func:`blamequeue.abc.compact_json`.
compact_json: Callable[[Any], str] = _one_encoder()


def dumps(value: Any) -> str:
    """Compact JSON; raises ``queue/bad-payload`` for anything JSON cannot hold."""
    try:
        text = compact_json(value)
        # A lone surrogate (what os.fsdecode makes of an undecodable name) passes json.dumps
        # but no store or sealer can hold it as UTF-8.
        text.encode("utf-8")
        return text
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


class Codec(Protocol):
    """Turns payloads and error texts into the strings a backend stores, and back."""

    sealed: bool

    def encode_payload(self, payload: Any) -> str: ...

    def encode_payloads(self, payloads: Sequence[Any]) -> list[str]:
        """:meth:`encode_payload` of each, in order (a batch's: cheaper than one by one)."""
        ...

    def decode_payload(self, data: str) -> Any:
        """Raises ``queue/unseal-failed`` for a stored value it cannot read."""
        ...

    def encode_error(self, message: str) -> str: ...

    def decode_error(self, data: str | None) -> str | None:
        """Never raises: an unreadable error becomes a text saying so."""
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
    """Plain JSON at rest: ``seal=False``."""

    sealed = False

    def encode_payload(self, payload: Any) -> str:
        return dumps(payload)

    def encode_payloads(self, payloads: Sequence[Any]) -> list[str]:
        return [dumps(payload) for payload in payloads]

    def decode_payload(self, data: str) -> Any:
        return _loads(data)

    def encode_error(self, message: str) -> str:
        return message

    def decode_error(self, data: str | None) -> str | None:
        return data


class SealedCodec:
    """JSON sealed by a :class:`~blamequeue._sealing.Sealer`: payloads and errors at rest.

    A stored value that does not unseal (altered, unknown key id, or plain JSON from
    ``seal=False``) raises ``queue/unseal-failed`` for a payload: the engine sends that job to
    the dead-letter queue.  Plain rows are refused because they carry no authentication;
    ``accept_unsealed=True`` reads them anyway, to migrate a store that ran with ``seal=False``.
    """

    sealed = True

    def __init__(self, sealer: Sealer, *, accept_unsealed: bool = False) -> None:
        self.sealer = sealer
        self.accept_unsealed = accept_unsealed
        self._seal = sealer.seal
        # Optional on a sealer: one call for a batch (SecretBoxSealer draws its nonces at once).
        self._seal_many: Callable[[Sequence[str]], list[str]] | None = getattr(
            sealer, "seal_many", None
        )
        self._sealer_unseal = sealer.unseal

    def __repr__(self) -> str:
        return f"SealedCodec({self.sealer!r}, accept_unsealed={self.accept_unsealed})"

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

    def encode_payload(self, payload: Any) -> str:
        return self._seal(dumps(payload))

    def encode_payloads(self, payloads: Sequence[Any]) -> list[str]:
        if self._seal_many is None or len(payloads) < 2:  # a batch call costs more for one
            return [self._seal(dumps(payload)) for payload in payloads]
        return self._seal_many([dumps(payload) for payload in payloads])

    def decode_payload(self, data: str) -> Any:
        try:
            text = self._unseal(data)
        except QueueError:
            if self.accept_unsealed:
                return _loads(data)
            raise
        return _loads(text)

    def encode_error(self, message: str) -> str:
        return self._seal(message)

    def decode_error(self, data: str | None) -> str | None:
        if data is None:
            return None
        try:
            return self._unseal(data)
        except QueueError as exc:
            if self.accept_unsealed:
                return data
            return f"{exc.code}: the last error could not be unsealed: {exc.message}"
