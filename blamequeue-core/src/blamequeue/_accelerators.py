"""Optional accelerators: speed-ups that reach into another library's private names.

Every default path is built on public APIs only.  An accelerator is a faster way to do what a
portable path already does, through a name another library does not promise to keep (pynacl's
cffi handle on libsodium, the C half of :mod:`json`'s encoder; the redis backend has its own in
``blamequeue_redis._accelerators``).  So that a release of that library which moves the name
costs speed and never a failed import or a wrong result, each accelerator is a function that

* probes at its first use, never at import: imports what it needs inside a ``try``, checks the
  attributes it calls, and runs a tiny self-test on known input, compared with what the
  portable path gives;
* returns ``None`` when anything is off (the caller then takes the portable path);
* logs once, at DEBUG on the ``blamequeue`` logger, which path is in use and why.

``BLAMEQUEUE_PORTABLE=1`` in the environment (read at each accelerator's first use) turns every
accelerator off, the backends' included: the portable paths only.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import nacl.bindings
import nacl.exceptions

__all__ = [
    "PORTABLE_ENV",
    "Accelerator",
    "Unfit",
    "accelerator",
    "json_encoder",
    "portable",
    "secretbox_batch",
    "secretbox_batch_portable",
    "secretbox_open",
    "secretbox_open_portable",
]

T = TypeVar("T")
log = logging.getLogger("blamequeue")

#: The environment switch that forces the portable paths everywhere.
PORTABLE_ENV = "BLAMEQUEUE_PORTABLE"


def portable() -> bool:
    """Whether ``BLAMEQUEUE_PORTABLE`` asks for the portable paths only (set, and not ``0``)."""
    return os.environ.get(PORTABLE_ENV, "").strip() not in ("", "0")


class Unfit(Exception):
    """Raised by a probe: the accelerator does not fit the installed library (never escapes
    :class:`Accelerator`, which turns it into ``None``)."""


class Accelerator(Generic[T]):
    """A probe, run once per key at first use: what it returns, or ``None`` when it raised
    (or ``BLAMEQUEUE_PORTABLE`` is set).  ``key`` maps the call's arguments to what the result
    depends on (the probe of a connection class, say, holds for every pool of it)."""

    def __init__(
        self, name: str, probe: Callable[..., T], key: Callable[..., Hashable] | None
    ) -> None:
        self.name = name
        self._probe = probe
        self._key = key
        self._found: dict[Hashable, T | None] = {}

    def __call__(self, *args: Any) -> T | None:
        key = self._key(*args) if self._key is not None else args
        try:
            return self._found[key]
        except KeyError:
            pass
        found: T | None = None
        if portable():
            why = f"{PORTABLE_ENV} is set"
        else:
            try:
                found = self._probe(*args)
                why = "its probe passed"
            except Exception as exc:  # anything off: the portable path, never a failure
                why = f"{type(exc).__name__}: {exc}"
        self._found[key] = found
        path = "accelerated" if found is not None else "portable"
        log.debug("%s: the %s path (%s)", self.name, path, why)
        return found

    def forget(self) -> None:
        """Probe again at the next use (tests, after changing ``BLAMEQUEUE_PORTABLE``)."""
        self._found.clear()


def accelerator(
    name: str, *, key: Callable[..., Hashable] | None = None
) -> Callable[[Callable[..., T]], Accelerator[T]]:
    """Make a probe function an :class:`Accelerator` named ``name`` (in the DEBUG log)."""

    def wrap(probe: Callable[..., T]) -> Accelerator[T]:
        return Accelerator(name, probe, key)

    return wrap


def _self_test(
    accelerated: Callable[..., Any], portable_path: Callable[..., Any], *args: Any
) -> None:
    got, want = accelerated(*args), portable_path(*args)
    if got != want:
        raise Unfit(f"its self-test gave {got!r}, the portable path {want!r}")


# -- JSON ----------------------------------------------------------------------------------------
_JSON_SAMPLE: Any = {"a": [1, -2.5, True, False, None, 'caf\u00e9 \u2028"\\\n'], "": {}, "b": []}


@accelerator("json encoder (json.encoder.c_make_encoder)", key=id)
def json_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` without its per-call set-up: the C encoder built once, without the
    circular reference check (whose price is a dict per call; a cycle still fails, as
    ``RecursionError``).  Same text as ``encoder.encode``, for an encoder without ``indent``.
    Keyed by the encoder's identity: keep the encoder alive as long as the result."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        raise Unfit("json.encoder has no c_make_encoder (a Python built without _json)")
    if encoder.indent is not None:
        raise Unfit("an encoder with indent is never built in C")
    if encoder.ensure_ascii:
        quote = json.encoder.encode_basestring_ascii
    else:
        quote = json.encoder.encode_basestring
    chunks = make(
        None,
        encoder.default,
        quote,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    _self_test(encode, encoder.encode, _JSON_SAMPLE)
    return encode


# -- libsodium -----------------------------------------------------------------------------------
SecretboxBatch = Callable[[bytes, bytes, Sequence[bytes]], list[bytes]]
_NONCE_BYTES = 24
_MAC_BYTES = 16


def secretbox_batch_portable(key: bytes, nonces: bytes, messages: Sequence[bytes]) -> list[bytes]:
    """Each message sealed with ``crypto_secretbox_easy`` under ``key`` and its own 24 bytes of
    ``nonces`` (in order), as ``nonce + MAC + ciphertext``: pynacl's public bindings."""
    seal = nacl.bindings.crypto_secretbox_easy
    return [
        nonces[start : start + _NONCE_BYTES]
        + seal(message, nonces[start : start + _NONCE_BYTES], key)
        for start, message in zip(range(0, len(nonces), _NONCE_BYTES), messages, strict=True)
    ]


@accelerator("batch sealing (nacl._sodium)")
def secretbox_batch() -> SecretboxBatch:
    """:func:`secretbox_batch_portable` through pynacl's own cffi handle on libsodium (the one its
    bindings call): the batch is sealed into one buffer without the binding's checks and
    allocations per message (~0.8 us a payload)."""
    from nacl._sodium import ffi, lib  # type: ignore[import-not-found]

    secretbox = lib.crypto_secretbox_easy
    new, buffer, from_buffer = ffi.new, ffi.buffer, ffi.from_buffer

    def seal_all(key: bytes, nonces: bytes, messages: Sequence[bytes]) -> list[bytes]:
        if len(key) != 32 or len(nonces) != _NONCE_BYTES * len(messages):
            raise ValueError("a 32-byte key and 24 bytes of nonce per message")
        box = new("unsigned char[]", max(map(len, messages), default=0) + _MAC_BYTES)
        boxed, nonce_at = buffer(box), from_buffer(nonces)
        out = []
        for start, message in zip(range(0, len(nonces), _NONCE_BYTES), messages, strict=True):
            size = len(message)
            if secretbox(box, message, size, nonce_at + start, key) != 0:
                raise nacl.exceptions.CryptoError("libsodium refused to seal a payload")
            out.append(nonces[start : start + _NONCE_BYTES] + boxed[: size + _MAC_BYTES])
        return out

    sample = (bytes(range(32)), bytes(range(72)), [b"", b"blamequeue", b"\x00" * 300])
    _self_test(seal_all, secretbox_batch_portable, *sample)
    return seal_all


SecretboxOpen = Callable[[bytes, bytes, bytes], bytes]


def secretbox_open_portable(box: bytes, nonce: bytes, key: bytes) -> bytes:
    """The text of ``box`` (MAC + ciphertext) sealed under ``key`` with ``nonce``; raises
    ``nacl.exceptions.CryptoError`` when it fails authentication: pynacl's public binding."""
    text: bytes = nacl.bindings.crypto_secretbox_open_easy(box, nonce, key)
    return text


@accelerator("unsealing (nacl._sodium)")
def secretbox_open() -> SecretboxOpen:
    """:func:`secretbox_open_portable` through pynacl's own cffi handle on libsodium, without the
    binding's argument checks and exception plumbing (~1 us of every lease's unsealing)."""
    from nacl._sodium import ffi, lib

    open_easy = lib.crypto_secretbox_open_easy
    new, buffer = ffi.new, ffi.buffer

    def open_box(box: bytes, nonce: bytes, key: bytes) -> bytes:
        size = len(box) - _MAC_BYTES
        if size < 0 or len(nonce) != _NONCE_BYTES or len(key) != 32:
            raise nacl.exceptions.CryptoError("not a sealed box for a 32-byte key")
        text = new("unsigned char[]", size or 1)
        if open_easy(text, box, len(box), nonce, key) != 0:
            raise nacl.exceptions.CryptoError("the box failed authentication")
        opened: bytes = buffer(text, size)[:]
        return opened

    key, nonce = bytes(range(32)), bytes(range(24))
    for message in (b"", b"blamequeue", b"\x00" * 300):
        box = nacl.bindings.crypto_secretbox_easy(message, nonce, key)
        _self_test(open_box, secretbox_open_portable, box, nonce, key)
    forged = b"\x01" + nacl.bindings.crypto_secretbox_easy(b"blamequeue", nonce, key)[1:]
    try:
        open_box(forged, nonce, key)
    except nacl.exceptions.CryptoError:
        return open_box
    raise Unfit("its self-test opened a forged box")
