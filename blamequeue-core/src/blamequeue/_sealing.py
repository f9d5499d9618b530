"""Sealing payloads and errors at rest (SPEC §6): the SecretBox sealer, seal keys and where they
come from.

Every backend stores what the codec hands it, so sealing happens once, here in the core: a
backend only ever sees envelopes.  An envelope is one line of ASCII::

    bq1:<key id>:<base64 of nonce + ciphertext>

``bq1`` is the format version; the key id names the key that sealed it, so several keys can be
configured at once (the first one seals, every one unseals: rotation keeps old rows readable).
SecretBox (XSalsa20-Poly1305) both hides and authenticates: a byte changed in the store makes
the row fail to unseal instead of handing the worker altered data.

Where the keys come from, first match wins (SPEC §6):

1. the backend config's own ``"seal"``;
2. ``Queue(seal=...)``;
3. ``BLAMEQUEUE_SEAL_KEYS`` (``kid:base64,kid2:base64``);
4. a backend whose ``Capabilities.requires_seal_key`` is true refuses to go on without a key;
5. a store with a file (``Backend.store_path``): the key file ``<path>.key`` beside it, created on
   first start (mode 0600; concurrent first starts agree on one key);
6. a store that lives in this process only (``Capabilities.ephemeral``: ``memory``): a key
   made for this process;
7. anything else (a durable store without a file, e.g. a bring-your-own SQLite connection)
   refuses to start, saying how to set a key.

``seal=False`` (at either level) is the explicit opt-out: plain JSON at rest.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import logging
import os
import re
import secrets
import shlex
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
import attrs
import nacl.bindings
import nacl.exceptions
import nacl.secret

from ._accelerators import (
    SecretboxOpen,
    secretbox_batch,
    secretbox_batch_portable,
    secretbox_open,
    secretbox_open_portable,
)
from ._codec import Codec, JsonCodec, SealedCodec, Sealer
from ._environment import parse_seal_keys
from .abc import Backend
from .errors import ConfigError, QueueError, SealKeyMissingError
from .hookspecs import hookimpl

__all__ = [
    "DEFAULT_SEALER",
    "ENVELOPE_VERSION",
    "SealPlan",
    "SecretBoxSealer",
    "Sealer",
    "key_file_path",
    "load_or_create_key_file",
    "new_key_line",
    "parse_seal_config",
    "plan_seal",
]

log = logging.getLogger("blamequeue")

ENVELOPE_VERSION = "bq1"
DEFAULT_SEALER = "secretbox"
KEY_BYTES = nacl.secret.SecretBox.KEY_SIZE  # 32
_NONCE_BYTES = nacl.secret.SecretBox.NONCE_SIZE  # 24: random nonces never repeat in practice
_secretbox_easy = nacl.bindings.crypto_secretbox_easy
ENV_VAR = "BLAMEQUEUE_SEAL_KEYS"
_KID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_SEAL_OPTIONS = frozenset({"keys", "sealer", "accept_unsealed", "accept_unbound"})
_HOW_TO_SET_A_KEY = (
    "run `blamequeue keygen` and put the line it prints in BLAMEQUEUE_SEAL_KEYS (or pass "
    'seal={"keys": {"<kid>": "<base64 key>"}} to Queue or in the backend config), or pass '
    "seal=False to store payloads as plain JSON"
)


SealerFactory = Callable[[Mapping[str, bytes]], Sealer]


def _unseal_error(message: str) -> QueueError:
    return QueueError("queue/unseal-failed", message)


def _config_error(message: str) -> ConfigError:
    return ConfigError("queue/invalid-config", message)


class SecretBoxSealer:
    """pynacl ``SecretBox`` with the key id in the envelope (registered as ``"secretbox"``).

    Sealing is on every enqueue and failure, unsealing on every lease, so they call the
    primitives ``SecretBox.encrypt`` and ``decrypt`` use (``crypto_secretbox_easy`` with a random
    24-byte nonce, and ``crypto_secretbox_open_easy``: the same bytes, nonce + MAC + ciphertext)
    without their per-call wrapper objects.
    """

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise _config_error("a sealer needs at least one key")
        for key in keys.values():
            nacl.secret.SecretBox(bytes(key))  # refuses a key of the wrong size, as before
        self._keys = {kid: bytes(key) for kid, key in keys.items()}
        writer = next(iter(self._keys))
        self._writer_key = bytes(keys[writer])
        self._head = f"{ENVELOPE_VERSION}:{writer}:"
        self.key_ids = tuple(self._keys)
        self._open: SecretboxOpen | None = None  # the unsealing path, picked at first use

    def __repr__(self) -> str:  # never the keys
        return f"SecretBoxSealer(key_ids={self.key_ids!r})"

    def seal(self, text: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = _secretbox_easy(text.encode("utf-8"), nonce, self._writer_key)
        return self._head + binascii.b2a_base64(nonce + sealed, newline=False).decode("ascii")

    def seal_many(self, texts: Sequence[str]) -> list[str]:
        """:meth:`seal` of each text, their random nonces drawn in one call.  Through the batch
        sealing accelerator (:func:`~blamequeue._accelerators.secretbox_batch`) when it fits the
        installed pynacl, else through pynacl's public bindings: the same envelopes."""
        seal_all = secretbox_batch() or secretbox_batch_portable
        nonces = os.urandom(_NONCE_BYTES * len(texts))
        messages = [text.encode("utf-8") for text in texts]
        head, b2a = self._head, binascii.b2a_base64
        return [
            head + b2a(sealed, newline=False).decode("ascii")
            for sealed in seal_all(self._writer_key, nonces, messages)
        ]

    def _pick_opener(self) -> SecretboxOpen:
        """The unsealing accelerator (:func:`~blamequeue._accelerators.secretbox_open`) when it
        fits the installed pynacl, else pynacl's public binding: the same texts."""
        self._open = secretbox_open() or secretbox_open_portable
        return self._open

    def unseal(self, envelope: str) -> str:
        version, _, rest = envelope.partition(":")
        kid, sep, body = rest.partition(":")
        if version != ENVELOPE_VERSION or not sep:
            raise _unseal_error(
                "the stored value is not a blamequeue envelope (it was written with seal=False, "
                "or altered outside blamequeue)"
            )
        key = self._keys.get(kid)
        if key is None and not _KID.match(kid):
            # Not the id of any key there could be: the envelope was altered (dead-lettered),
            # not sealed with a key this process lacks (released, and leasing stops).
            raise _unseal_error(
                f"the stored value names key id {kid[:64]!r}, which no key can have: it was "
                f"altered outside blamequeue"
            )
        if key is None:
            raise SealKeyMissingError(
                f"the stored value was sealed with key id {kid[:64]!r}, which is not among the "
                f"configured keys {list(self.key_ids)}; add that key (after the current one) to "
                f"read it",
                key_id=kid[:64],
            )
        try:
            sealed = binascii.a2b_base64(body, strict_mode=True)
            nonce, box = sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:]
            opener = self._open or self._pick_opener()
            return opener(box, nonce, key).decode("utf-8")
        except (binascii.Error, ValueError, nacl.exceptions.CryptoError) as exc:
            raise _unseal_error(
                f"the stored value sealed with key id {kid!r} failed authentication: it was "
                f"altered in the store, or sealed with a different key under the same id"
            ) from exc


@hookimpl
def blamequeue_register_sealers(register: Callable[[str, Any], None]) -> None:
    """The built-in sealer: ``"secretbox"`` (the default)."""
    register(DEFAULT_SEALER, SecretBoxSealer)


# -- keys ------------------------------------------------------------------------------------
def _decode_keys(keys: Mapping[str, str], where: str) -> dict[str, bytes]:
    """Check key ids and decode ``{kid: base64}`` to ``{kid: 32 bytes}``, keeping the order."""
    decoded: dict[str, bytes] = {}
    for kid, value in keys.items():
        if not isinstance(kid, str) or not _KID.match(kid):
            raise _config_error(
                f"{where}: key id {kid!r} must be 1-64 letters, digits, '.', '_' or '-' "
                f"(starting with a letter or digit)"
            )
        if not isinstance(value, str):
            raise _config_error(
                f"{where}: key {kid!r} must be a base64 string of {KEY_BYTES} bytes "
                f"(`blamequeue keygen` makes one), got {type(value).__name__}"
            )
        try:
            raw = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _config_error(f"{where}: key {kid!r} is not valid base64") from exc
        if len(raw) != KEY_BYTES:
            raise _config_error(f"{where}: key {kid!r} must be {KEY_BYTES} bytes, got {len(raw)}")
        decoded[kid] = raw
    return decoded


@attrs.frozen(kw_only=True)
class SealConfig:
    """A validated ``{"keys": ..., "sealer": ..., "accept_unsealed": ...}`` mapping."""

    keys: Mapping[str, bytes] = attrs.field(repr=lambda keys: repr(list(keys)))
    sealer: str = DEFAULT_SEALER
    accept_unsealed: bool = False
    accept_unbound: bool = False


def parse_seal_config(value: Any, where: str) -> SealConfig | Literal[False]:
    """Validate a ``seal`` setting: ``{"keys": {kid: base64, ...}}`` (first key seals) or False.

    Optional keys: ``"sealer"`` (a registered sealer name, default ``"secretbox"``),
    ``"accept_unsealed"`` (read plain-JSON rows written with ``seal=False`` earlier; off by
    default because an unsealed row is unauthenticated) and ``"accept_unbound"`` (read values
    sealed by a version that did not bind seals to their job; off by default because such a
    value could have been copied from another job).
    """
    if value is False:
        return False
    if not isinstance(value, Mapping):
        raise _config_error(
            f'{where} must be {{"keys": {{"<kid>": "<base64 of {KEY_BYTES} bytes>"}}}} or False '
            f"(leave it unset for the default key source), got {value!r:.40}"
        )
    unknown = sorted(map(str, set(value) - _SEAL_OPTIONS))
    if unknown:
        raise _config_error(
            f"{where} does not take {', '.join(map(repr, unknown))}; it takes 'keys' and "
            f"optionally 'sealer', 'accept_unsealed' and 'accept_unbound'"
        )
    keys = value.get("keys")
    if not isinstance(keys, Mapping) or not keys:
        raise _config_error(
            f'{where} needs "keys": a non-empty mapping of key id to base64 key, the first '
            f"one sealing new rows (make one with `blamequeue keygen`)"
        )
    sealer = value.get("sealer", DEFAULT_SEALER)
    if not isinstance(sealer, str) or not sealer:
        raise _config_error(f"{where}.sealer must be a sealer name, got {sealer!r}")
    flags = {}
    for flag in ("accept_unsealed", "accept_unbound"):
        flags[flag] = value.get(flag, False)
        if not isinstance(flags[flag], bool):
            raise _config_error(f"{where}.{flag} must be True or False, got {flags[flag]!r}")
    return SealConfig(keys=_decode_keys(keys, f"{where}.keys"), sealer=sealer, **flags)


def new_kid() -> str:
    """A fresh key id: the UTC date it was made and a random suffix (``k20250611-3fa2c1``)."""
    return time.strftime("k%Y%m%d", time.gmtime()) + "-" + secrets.token_hex(3)


def new_key_line(kid: str | None = None) -> str:
    """``kid:base64`` of a new random key, the format of ``BLAMEQUEUE_SEAL_KEYS`` entries."""
    kid = new_kid() if kid is None else kid
    if not _KID.match(kid):
        raise _config_error(
            f"key id {kid!r} must be 1-64 letters, digits, '.', '_' or '-' (starting with a "
            f"letter or digit)"
        )
    key = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")
    return f"{kid}:{key}"


# -- the key file beside a database ---------------------------------------------------------
def key_file_path(store_path: str) -> str:
    return f"{store_path}.key"


_READ_ATTEMPTS = 40
_READ_PAUSE = 0.05


def _parse_key_file(text: str, path: str) -> dict[str, bytes]:
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    where = f"seal key file {path}"
    return _decode_keys(parse_seal_keys(",".join(lines), where=where), where)


# Mode and owner are only meaningful where files have POSIX owners: on Windows ``st_mode`` says
# 0o666 for any writable file and ``st_uid`` is 0, so neither check can be made there.
_POSIX_OWNERS = hasattr(os, "geteuid")


def _refuse_unsafe_key_file(info: os.stat_result, path: str) -> None:
    """Refuse a key file that anyone but its owner (the running user) could read or replace.

    A warning would be logged and then ignored while the key stays readable; refusing to start
    with the exact command that fixes it costs one restart and keeps the key private.
    """
    quoted = shlex.quote(path)
    if not stat.S_ISREG(info.st_mode):
        raise _config_error(
            f"the seal key file {path} is not a regular file; put the key file itself there "
            f"(or remove {path} to have a new key made, if no job was sealed with the old one)"
        )
    if not _POSIX_OWNERS:
        return
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise _config_error(
            f"the seal key file {path} can be used by other users (mode {mode:o}); run "
            f"`chmod 600 {quoted}` so that only its owner can read it, then start again"
        )
    user = os.geteuid()
    if info.st_uid != user:
        raise _config_error(
            f"the seal key file {path} belongs to user id {info.st_uid}, not to the user "
            f"running this process (id {user}); run `chown {user} {quoted}` (as root) and "
            f"`chmod 600 {quoted}`, or run blamequeue as the user who owns the file"
        )


def _open_key_file(path: str) -> int:
    """Open the key file for reading without following a symbolic link.

    A link could point the queue at a key someone else controls (or at a file it then treats as
    its key), so the key file must be the file itself.  :class:`FileNotFoundError` is left to the
    caller (a missing key file is created).
    """
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not nofollow and os.path.islink(path):  # no O_NOFOLLOW here: look first
        raise _symlink_refused(path)
    try:
        return os.open(path, os.O_RDONLY | nofollow)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno != errno.ENOENT and os.path.islink(path)):
            raise _symlink_refused(path) from exc
        raise


def _symlink_refused(path: str) -> ConfigError:
    return _config_error(
        f"the seal key file {path} is a symbolic link, and a key file is never read through "
        f"one; replace the link with the key file itself (`cp --remove-destination "
        f'"$(readlink -f {shlex.quote(path)})" {shlex.quote(path)}` and `chmod 600` it), '
        f"or point the backend's path where its key file lives"
    )


def _read_key_file(path: str) -> dict[str, bytes]:
    """Read and parse the key file; a file another process is still writing is retried.

    A symbolic link, a file other users can read or write, or one the running user does not own
    is refused with ``queue/invalid-config`` before its content is read.
    """
    for attempt in range(_READ_ATTEMPTS):
        fd = _open_key_file(path)
        try:
            _refuse_unsafe_key_file(os.fstat(fd), path)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, encoding="utf-8") as handle:
            text = handle.read()
        try:
            return _parse_key_file(text, path)
        except ConfigError:
            # Only the O_EXCL fallback (no hard links) can show a file mid-write: a cut key
            # never parses (wrong length or bad base64), so wait for the writer to finish.
            if attempt == _READ_ATTEMPTS - 1:
                raise
            time.sleep(_READ_PAUSE)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _write_owner_only(fd: int, content: str) -> None:
    """Write ``content`` to the file just created at ``fd``, mode 0600, and flush it to disk;
    closes ``fd``.  The mode is set explicitly: ``os.open``'s mode is cut by the umask, never
    widened, and a umask that takes the owner's own bits would leave a key its owner cannot
    read."""
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())


def _write_exclusive(path: str, content: str) -> None:
    """Create ``path`` holding ``content`` only if it does not exist, all at once, mode 0600.

    The key is written to a private temporary file (``mkstemp``: ``O_EXCL``, mode 0600) in the
    same directory, flushed to disk, then hard-linked to ``path``: the link fails when ``path``
    exists and never exposes a half-written key.  On a filesystem without hard links it falls
    back to ``O_CREAT | O_EXCL`` on ``path`` itself (readers then wait for the final newline).
    Either way the file is 0600 whatever the umask.  Raises :class:`FileExistsError` when
    another process created the file first (or a link stands there: ``O_EXCL`` and ``link``
    never follow one).
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".blamequeue-key-", dir=directory)
    try:
        _write_owner_only(fd, content)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            _write_owner_only(fd, content)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    with contextlib.suppress(OSError):  # make the new name durable (best effort)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def load_or_create_key_file(path: str) -> tuple[dict[str, bytes], bool]:
    """The keys of the key file at ``path``, creating it with a new key when it is missing.

    Returns ``(keys, created)``.  Concurrent first starts (threads or processes) all end up
    with the key of whichever created the file.  Blocking: run it in a worker thread.
    """
    try:
        return _read_key_file(path), False
    except FileNotFoundError:
        pass
    content = (
        "# blamequeue seal key (BLAMEQUEUE_SEAL_KEYS format; the first line seals). Keep it\n"
        "# secret and back it up with the database: without it the jobs cannot be read.\n"
        f"{new_key_line()}\n"
    )
    try:
        _write_exclusive(path, content)
    except FileExistsError:
        return _read_key_file(path), False  # another process won the race: use its key
    return _parse_key_file(content, path), True


_process_keys: dict[str, bytes] | None = None
_process_lock = threading.Lock()


def process_keys() -> dict[str, bytes]:
    """A key made once per process, for stores that die with it (``memory``)."""
    global _process_keys
    with _process_lock:
        if _process_keys is None:
            _process_keys = {"process": secrets.token_bytes(KEY_BYTES)}
        return _process_keys


# -- choosing the codec of one backend -------------------------------------------------------
class _UnpreparedCodec:
    """Stands in until :meth:`SealPlan.prepare` ran: nothing may be encoded without the key."""

    sealed = True

    def _refuse(self) -> QueueError:
        return QueueError(
            "queue/not-initialized",
            "the seal key of this backend is loaded when the queue starts; start it first",
        )

    def encode_payload(self, payload: Any, where: bytes) -> str:
        raise self._refuse()

    def seal_texts(self, texts: Sequence[str], places: Sequence[bytes]) -> list[str]:
        raise self._refuse()

    def decode_payload(self, data: str, where: bytes) -> Any:
        raise self._refuse()

    def encode_error(self, message: str, where: bytes) -> str:
        raise self._refuse()

    def decode_error(self, data: str | None, where: bytes) -> str | None:
        raise self._refuse()

    def seal_text(self, text: str, where: bytes) -> str:
        raise self._refuse()

    def open_text(self, data: str, where: bytes) -> str:
        raise self._refuse()


SealSource = Literal["off", "backend", "queue", "env", "key-file", "process"]


@attrs.define(eq=False)
class SealPlan:
    """How one backend seals: decided at construction, key file loaded by :meth:`prepare`."""

    source: SealSource
    codec: Codec
    key_file: str | None = None
    _factory: SealerFactory | None = attrs.field(default=None, repr=False)
    keys: Mapping[str, bytes] | None = attrs.field(default=None, repr=False)
    """The keyring the codec seals with (first seals), once known; ``None`` with sealing off
    or before :meth:`prepare` loaded the key file.  The audit chain derives its key from it."""

    async def prepare(self) -> Codec:
        """Load (or create) the key file, if this backend uses one.  Idempotent."""
        if self.key_file is not None and isinstance(self.codec, _UnpreparedCodec):
            assert self._factory is not None
            path = self.key_file
            try:
                keys = await anyio.to_thread.run_sync(_load_key_file_logged, path)
            except OSError as exc:
                raise _config_error(
                    f"cannot read or create the seal key file {path} ({exc}); make its "
                    f"directory writable, or {_HOW_TO_SET_A_KEY}"
                ) from exc
            self.codec = SealedCodec(self._factory(keys))
            self.keys = keys
        return self.codec


def _load_key_file_logged(path: str) -> dict[str, bytes]:
    keys, created = load_or_create_key_file(path)
    if created:
        log.info("created seal key file %s (mode 0600); back it up with the database", path)
    return keys


def _sealer_factory(name: str, sealers: Mapping[str, Any], where: str) -> SealerFactory:
    registration = sealers.get(name)
    if registration is not None:
        factory: SealerFactory = registration.value
        return factory
    if name == DEFAULT_SEALER:
        # Sealing must not switch itself off because an allow-list (BLAMEQUEUE_PLUGINS) left
        # out core's own sealer plugin: the default is always available.
        return SecretBoxSealer
    known = ", ".join(sorted({DEFAULT_SEALER, *sealers}))
    raise _config_error(f"{where}.sealer {name!r} is not registered; registered sealers: {known}")


def _env_config(env: Mapping[str, str]) -> SealConfig | None:
    raw = env.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    return SealConfig(keys=_decode_keys(parse_seal_keys(raw), ENV_VAR))


def plan_seal(
    *,
    name: str,
    protocol: str,
    backend_seal: Any,
    queue_seal: Any,
    env: Mapping[str, str],
    backend: Backend,
    sealers: Mapping[str, Any],
) -> SealPlan:
    """Pick the seal setting of backend ``name`` by SPEC §6 precedence.  No I/O."""
    where = f"backends[{name!r}]"
    config: SealConfig | Literal[False] | None
    source: SealSource
    if backend_seal is not None:
        at = f"{where}.seal"
        config, source = parse_seal_config(backend_seal, at), "backend"
    elif queue_seal is not None:
        at = "seal"
        config, source = parse_seal_config(queue_seal, at), "queue"
    else:
        at = ENV_VAR
        config, source = _env_config(env), "env"
    if config is False:
        return SealPlan(source="off", codec=JsonCodec())
    if config is not None:
        factory = _sealer_factory(config.sealer, sealers, at)
        codec = SealedCodec(
            factory(config.keys),
            accept_unsealed=config.accept_unsealed,
            accept_unbound=config.accept_unbound,
        )
        return SealPlan(source=source, codec=codec, keys=config.keys)

    capabilities = backend.capabilities
    if capabilities.requires_seal_key:
        raise _config_error(
            f"{where} (protocol {protocol!r}) keeps payloads on a shared server, so it needs "
            f"a seal key: {_HOW_TO_SET_A_KEY}"
        )
    path = backend.store_path
    if path is not None:
        return SealPlan(
            source="key-file",
            codec=_UnpreparedCodec(),
            key_file=key_file_path(path),
            factory=_sealer_factory(DEFAULT_SEALER, sealers, where),
        )
    if capabilities.ephemeral:
        factory = _sealer_factory(DEFAULT_SEALER, sealers, where)
        keys = process_keys()
        return SealPlan(source="process", codec=SealedCodec(factory(keys)), keys=keys)
    raise _config_error(
        f"{where} (protocol {protocol!r}) keeps jobs beyond this process but has no database "
        f"file to keep a seal key beside (a bring-your-own store?), so it needs a key: "
        f"{_HOW_TO_SET_A_KEY}"
    )
