"""How payloads and errors are written at rest: JSON text, one place for the whole library."""

from __future__ import annotations

import json
from typing import Any

from .errors import BadArgumentError, QueueError

__all__ = ["JsonCodec", "dumps"]


def dumps(value: Any) -> str:
    """Compact JSON; raises ``queue/bad-payload`` for anything JSON cannot hold."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadArgumentError(
            "queue/bad-payload",
            f"payload must be JSON-serialisable (dict, list, str, int, float, bool, None; no "
            f"NaN/Infinity): {exc}. Convert it (e.g. a datetime to .isoformat(), a set to a "
            f"list, a model to a dict) before enqueueing.",
        ) from exc


class JsonCodec:
    """Plain JSON (issue: sealing wraps this)."""

    def encode_payload(self, payload: Any) -> str:
        return dumps(payload)

    def decode_payload(self, data: str) -> Any:
        try:
            return json.loads(data)
        except ValueError as exc:
            raise QueueError(
                "queue/unseal-failed",
                f"stored payload could not be decoded ({exc}); the row was altered outside "
                f"blamequeue",
            ) from exc

    def encode_error(self, message: str) -> str:
        return message

    def decode_error(self, data: str | None) -> str | None:
        return data
