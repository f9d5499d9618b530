"""Sealing at rest (SPEC §6): the SecretBox sealer, seal settings and their precedence, the key
file, the process key, custom sealers, and what an unreadable row does."""

from __future__ import annotations

import base64
import logging
import os
import sqlite3
import stat
import threading
import types
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from blamequeue import Job, JobContext, Queue, QueueError, hookimpl
from blamequeue._accelerators import PORTABLE_ENV, secretbox_batch, secretbox_open
from blamequeue._codec import JsonCodec, SealedCodec, dumps, place
from blamequeue._plugins import Registration, _collect, load_registry
from blamequeue._sealing import (
    ENVELOPE_VERSION,
    SecretBoxSealer,
    load_or_create_key_file,
    new_key_line,
    parse_seal_config,
)
from blamequeue.errors import ConfigError
from blamequeue_testing import MemoryBackend, VirtualClock

K1 = base64.b64encode(b"1" * 32).decode()
K2 = base64.b64encode(b"2" * 32).decode()
SECRET = "payload-secret-0b1e"
W = place("payload", "q", "job-1")  # where the values of these tests belong


def sealer(**keys: bytes) -> SecretBoxSealer:
    return SecretBoxSealer(keys)


@pytest.fixture(autouse=True)
def _no_seal_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLAMEQUEUE_SEAL_KEYS", raising=False)


def runtime_of(queue: Queue, name: str = "b") -> Any:
    return queue._runtimes[name]


async def drain(queue: Queue, name: str = "q") -> list[Any]:
    seen: list[Any] = []

    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job.payload)

    await queue.tick(name, record, max=100)
    return seen


# -- the sealer -------------------------------------------------------------------------------
def test_an_envelope_names_the_format_version_and_the_key_id() -> None:
    envelope = sealer(k1=b"1" * 32).seal('{"a":1}')
    version, kid, body = envelope.split(":")
    assert (version, kid) == (ENVELOPE_VERSION, "k1")
    assert len(base64.b64decode(body)) == 24 + 16 + len('{"a":1}')  # nonce + MAC + text


def test_sealing_the_same_text_twice_gives_different_envelopes() -> None:
    box = sealer(k1=b"1" * 32)
    first, second = box.seal("same"), box.seal("same")
    assert first != second
    assert box.unseal(first) == box.unseal(second) == "same"


@pytest.mark.parametrize("through", ["libsodium", "bindings"])
def test_a_batch_is_sealed_as_one_by_one_each_with_a_nonce_of_its_own(
    through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secretbox_batch, "_found", {})  # probed afresh, for this test only
    if through == "bindings":  # the batch sealing accelerator off: pynacl's public bindings
        monkeypatch.setenv(PORTABLE_ENV, "1")
    else:
        monkeypatch.delenv(PORTABLE_ENV, raising=False)
    assert (secretbox_batch() is None) == (through == "bindings")
    box = sealer(k1=b"1" * 32)
    # the longest text sizes the shared buffer: shorter ones after it must not carry its tail
    texts = ["same"] * 500 + ['{"a":1}', "", "é" * 5000, "x"]
    envelopes = box.seal_many(texts)
    assert [box.unseal(envelope) for envelope in envelopes] == texts
    nonces = {base64.b64decode(envelope.split(":")[2])[:24] for envelope in envelopes}
    assert len(nonces) == len(texts)
    assert all(envelope.startswith("bq1:k1:") for envelope in envelopes)
    assert box.seal_many([]) == []
    codec = SealedCodec(box)  # a batch goes through seal_many, one payload through seal
    for payloads in ([{"a": 1}, [2], "three"], [{"a": 1}]):
        encoded = codec.seal_texts([dumps(p) for p in payloads], [W] * len(payloads))
        assert [codec.decode_payload(text, W) for text in encoded] == payloads


@pytest.mark.parametrize("through", ["libsodium", "bindings"])
def test_unsealing_opens_what_was_sealed_and_refuses_an_altered_envelope(
    through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secretbox_open, "_found", {})  # probed afresh, for this test only
    if through == "bindings":  # the unsealing accelerator off: pynacl's public binding
        monkeypatch.setenv(PORTABLE_ENV, "1")
    else:
        monkeypatch.delenv(PORTABLE_ENV, raising=False)
    assert (secretbox_open() is None) == (through == "bindings")
    box = sealer(k1=b"1" * 32)
    texts = ["", "same", '{"a":1}', "\u00e9" * 5000]
    assert [box.unseal(envelope) for envelope in box.seal_many(texts)] == texts
    assert box.unseal(box.seal("one")) == "one"
    head, body = box.seal("secret").rsplit(":", 1)
    raw = bytearray(base64.b64decode(body))
    for at in (0, 24, len(raw) - 1):  # the nonce, the MAC, the ciphertext
        altered = bytearray(raw)
        altered[at] ^= 1
        with pytest.raises(QueueError) as refused:
            box.unseal(f"{head}:{base64.b64encode(bytes(altered)).decode()}")
        assert "failed authentication" in refused.value.message
    with pytest.raises(QueueError):  # shorter than a MAC
        box.unseal(f"{head}:{base64.b64encode(raw[:30]).decode()}")


def test_a_sealed_codec_seals_a_batch_with_a_sealer_that_seals_one_at_a_time() -> None:
    # seal_many is optional on a sealer: without it the codec seals each payload.
    codec = SealedCodec(ReversingSealer({"r1": K1}))
    sealed = codec.seal_texts(['{"x":1}', '"ab"'], [W, W])
    assert [text[:11] for text in sealed] == ['rev:r1:}1:"', 'rev:r1:"ba"']
    assert [codec.decode_payload(text, W) for text in sealed] == [{"x": 1}, "ab"]
    with pytest.raises(QueueError) as refused:
        codec.encode_payload({2}, W)
    assert refused.value.code == "queue/bad-payload"


def test_the_first_key_seals_and_every_key_unseals() -> None:
    old = sealer(k1=b"1" * 32)
    rotated = sealer(k2=b"2" * 32, k1=b"1" * 32)
    assert rotated.unseal(old.seal("from before")) == "from before"
    assert rotated.seal("new").startswith("bq1:k2:")


@pytest.mark.parametrize(
    ("envelope", "says"),
    [
        ('{"plain": "json"}', "not a blamequeue envelope"),
        ("bq2:k1:AAAA", "not a blamequeue envelope"),
        ("bq1:nokid", "not a blamequeue envelope"),
        ("bq1:k9:AAAA", "key id 'k9'"),
        ("bq1::AAAA", "no key can have"),
        ("bq1:k/9:AAAA", "no key can have"),
        ("bq1:k1:not base64!", "failed authentication"),
        ("bq1:k1:AAAA", "failed authentication"),
    ],
)
def test_what_cannot_be_unsealed_raises_unseal_failed(envelope: str, says: str) -> None:
    with pytest.raises(QueueError) as info:
        sealer(k1=b"1" * 32).unseal(envelope)
    assert info.value.code == "queue/unseal-failed"
    assert says in info.value.message


def test_a_changed_byte_fails_authentication() -> None:
    box = sealer(k1=b"1" * 32)
    envelope = box.seal("authentic")
    head, body = envelope.rsplit(":", 1)
    raw = bytearray(base64.b64decode(body))
    raw[-1] ^= 1
    with pytest.raises(QueueError, match="failed authentication"):
        box.unseal(f"{head}:{base64.b64encode(bytes(raw)).decode()}")


def test_reprs_never_show_a_key() -> None:
    box = sealer(k1=b"\x01" * 32)
    config = parse_seal_config({"keys": {"k1": K1}}, "seal")
    for text in (repr(box), repr(SealedCodec(box)), repr(config)):
        assert K1 not in text
        assert "k1" in text


def test_a_sealed_codec_turns_an_unreadable_error_into_a_text_saying_so() -> None:
    codec = SealedCodec(sealer(k1=b"1" * 32))
    assert codec.decode_error(codec.encode_error("boom", W), W) == "boom"
    assert codec.decode_error(None, W) is None
    text = codec.decode_error("bq1:k1:AAAA", W)
    assert text is not None
    assert text.startswith("queue/unseal-failed: the last error could not be unsealed")


def test_plain_rows_are_read_only_with_accept_unsealed() -> None:
    box = sealer(k1=b"1" * 32)
    with pytest.raises(QueueError) as info:
        SealedCodec(box).decode_payload('{"a": 1}', W)
    assert info.value.code == "queue/unseal-failed"
    lax = SealedCodec(box, accept_unsealed=True)
    assert lax.decode_payload('{"a": 1}', W) == {"a": 1}
    assert lax.decode_payload(lax.encode_payload({"b": 2}, W), W) == {"b": 2}
    assert lax.decode_error("plain error", W) == "plain error"


def test_a_plain_codec_reading_a_sealed_row_says_sealing_may_be_off() -> None:
    with pytest.raises(QueueError) as info:
        JsonCodec().decode_payload(sealer(k1=b"1" * 32).seal("{}"), W)
    assert info.value.code == "queue/unseal-failed"
    assert "seal=False" in info.value.message


# -- seal settings ----------------------------------------------------------------------------
def test_seal_config_keeps_the_key_order_first_one_sealing() -> None:
    config = parse_seal_config({"keys": {"k2": K2, "k1": K1}}, "seal")
    assert config is not False
    assert list(config.keys) == ["k2", "k1"]
    assert config.keys["k2"] == b"2" * 32
    assert parse_seal_config(False, "seal") is False


@pytest.mark.parametrize(
    ("seal", "says"),
    [
        (True, "or False"),
        ("k1:abc", "or False"),
        ({}, '"keys"'),
        ({"keys": {}}, '"keys"'),
        ({"keys": [K1]}, '"keys"'),
        ({"keys": {"k1": "not base64!"}}, "not valid base64"),
        ({"keys": {"k1": base64.b64encode(b"short").decode()}}, "must be 32 bytes, got 5"),
        ({"keys": {"k1": b"1" * 32}}, "base64 string"),
        ({"keys": {"bad kid": K1}}, "key id 'bad kid'"),
        ({"keys": {"k1": K1}, "rotate": True}, "'rotate'"),
        ({"keys": {"k1": K1}, "accept_unsealed": "yes"}, "accept_unsealed"),
        ({"keys": {"k1": K1}, "sealer": ""}, "sealer"),
        ({"keys": {"k1": K1}, "sealer": "enigma"}, "'enigma' is not registered"),
    ],
)
def test_a_bad_seal_setting_is_an_invalid_config_naming_the_problem(seal: Any, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        Queue(backends={"b": {"protocol": "memory"}}, seal=seal)
    assert info.value.code == "queue/invalid-config"
    assert says in info.value.message
    with pytest.raises(ConfigError) as info:
        Queue(backends={"b": {"protocol": "memory", "seal": seal}})
    assert says in info.value.message
    assert "backends['b'].seal" in info.value.message


def test_a_bad_queue_seal_is_refused_even_when_every_backend_has_its_own() -> None:
    with pytest.raises(ConfigError):
        Queue(
            backends={"b": {"protocol": "memory", "seal": False}},
            seal={"keys": {"k1": "nope"}},
        )


def test_a_malformed_seal_keys_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", "k1:tooshort")
    with pytest.raises(ConfigError, match="BLAMEQUEUE_SEAL_KEYS"):
        Queue(backends={"b": {"protocol": "memory"}})


@pytest.mark.parametrize(
    ("backend_seal", "queue_seal", "env", "source"),
    [
        ({"keys": {"b": K1}}, {"keys": {"q": K2}}, f"e:{K1}", "backend"),
        (False, {"keys": {"q": K2}}, f"e:{K1}", "off"),
        (None, {"keys": {"q": K2}}, f"e:{K1}", "queue"),
        (None, False, f"e:{K1}", "off"),
        (None, None, f"e:{K1}", "env"),
        (None, None, None, "process"),
    ],
)
def test_seal_precedence_backend_then_queue_then_environment(
    monkeypatch: pytest.MonkeyPatch,
    backend_seal: Any,
    queue_seal: Any,
    env: str | None,
    source: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", env)
    config: dict[str, Any] = {"protocol": "memory"}
    if backend_seal is not None:
        config["seal"] = backend_seal
    queue = Queue(backends={"b": config}, seal=queue_seal)
    runtime = runtime_of(queue)
    assert runtime.seal.source == source
    assert runtime.codec.sealed is (source != "off")


def test_the_writer_key_follows_the_setting_that_won(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", f"env:{K1}")
    queue = Queue(
        backends={
            "a": {"protocol": "memory", "seal": {"keys": {"own": K2}}},
            "b": {"protocol": "memory"},
        },
        default_backend="a",
    )
    assert runtime_of(queue, "a").codec.encode_payload(1, W).startswith("bq1:own:")
    assert runtime_of(queue, "b").codec.encode_payload(1, W).startswith("bq1:env:")


def test_from_env_seals_with_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    queue = Queue.from_env({"BLAMEQUEUE_PROTOCOL": "memory", "BLAMEQUEUE_SEAL_KEYS": f"k9:{K1}"})
    assert runtime_of(queue, "default").codec.encode_payload(1, W).startswith("bq1:k9:")


class SharedServerBackend(MemoryBackend):
    """Stands in for redis / sqs: its payloads would leave the process."""

    protocol = "shared-server"
    requires_seal_key = True
    ephemeral = False


class DurableNoPathBackend(MemoryBackend):
    """A durable store with nowhere to keep a key file."""

    protocol = "durable-no-path"
    ephemeral = False


@pytest.fixture
def extra_protocols(monkeypatch: pytest.MonkeyPatch) -> None:
    protocols = load_registry().protocols
    for cls in (SharedServerBackend, DurableNoPathBackend):
        monkeypatch.setitem(protocols, cls.protocol, Registration(value=cls, plugin="tests"))


@pytest.mark.usefixtures("extra_protocols")
def test_a_backend_that_requires_a_key_refuses_to_start_without_one() -> None:
    with pytest.raises(ConfigError) as info:
        Queue(backends={"b": {"protocol": "shared-server"}})
    assert info.value.code == "queue/invalid-config"
    for hint in ("blamequeue keygen", "BLAMEQUEUE_SEAL_KEYS", "seal=False"):
        assert hint in info.value.message


@pytest.mark.usefixtures("extra_protocols")
def test_a_backend_that_requires_a_key_runs_with_one_or_with_seal_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_sealing = Queue(backends={"b": {"protocol": "shared-server"}}, seal=False)
    assert runtime_of(without_sealing).seal.source == "off"
    monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", f"k1:{K1}")
    assert runtime_of(Queue(backends={"b": {"protocol": "shared-server"}})).seal.source == "env"


@pytest.mark.usefixtures("extra_protocols")
def test_a_durable_store_without_a_path_or_a_key_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        Queue(backends={"b": {"protocol": "durable-no-path"}})
    assert "blamequeue keygen" in info.value.message


def test_a_bring_your_own_sqlite_store_needs_a_key(tmp_path: Path) -> None:
    pytest.importorskip("blamequeue_local")
    connection = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    try:
        with pytest.raises(ConfigError) as info:
            Queue(backends={"b": {"protocol": "local", "store": connection}})
        assert "bring-your-own" in info.value.message
        assert "seal=False" in info.value.message
        Queue(backends={"b": {"protocol": "local", "store": connection}}, seal={"keys": {"k": K1}})
    finally:
        connection.close()


@pytest.mark.anyio
async def test_memory_backends_of_one_process_share_the_process_key() -> None:
    config = {"protocol": "memory", "namespace": "sealing-process-key"}
    try:
        async with Queue(backends={"b": config}) as writer, Queue(backends={"b": config}) as reader:
            await writer.enqueue("q", {"card": SECRET})
            assert await drain(reader) == [{"card": SECRET}]
    finally:
        MemoryBackend.forget_namespace("sealing-process-key")


@pytest.mark.anyio
async def test_an_allow_list_without_the_sealer_plugin_still_seals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PLUGINS", "memory")
    assert "secretbox" not in load_registry().sealers
    async with Queue(backends={"b": {"protocol": "memory"}}) as queue:
        assert runtime_of(queue).codec.encode_payload(SECRET, W).startswith("bq1:process:")


# -- custom sealers through the hook -----------------------------------------------------------
class ReversingSealer:
    """A toy sealer (not secure!) to show the hook: the key id and the reversed text."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self.kid = next(iter(keys))

    def seal(self, text: str) -> str:
        return f"rev:{self.kid}:{text[::-1]}"

    def unseal(self, envelope: str) -> str:
        prefix = f"rev:{self.kid}:"
        if not envelope.startswith(prefix):
            raise RuntimeError("a sealer bug, not a QueueError")
        return envelope[len(prefix) :][::-1]


@pytest.fixture
def reversing_sealer(monkeypatch: pytest.MonkeyPatch) -> None:
    @hookimpl
    def blamequeue_register_sealers(register: Any) -> None:
        register("reverse", ReversingSealer)

    import pluggy

    from blamequeue import hookspecs

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(
        types.SimpleNamespace(blamequeue_register_sealers=blamequeue_register_sealers),
        name="reverse-plugin",
    )
    registry = load_registry()
    found = _collect(manager, "blamequeue_register_sealers", "sealer")
    monkeypatch.setattr(registry, "sealers", {**registry.sealers, **found})


@pytest.mark.anyio
@pytest.mark.usefixtures("reversing_sealer")
async def test_a_sealer_registered_by_a_plugin_is_used_when_named() -> None:
    queue = Queue(
        backends={"b": {"protocol": "memory"}}, seal={"keys": {"r1": K1}, "sealer": "reverse"}
    )
    async with queue:
        assert runtime_of(queue).codec.encode_payload("abc", W).startswith('rev:r1:"cba"')
        await queue.enqueue("q", {"x": 1})
        assert await drain(queue) == [{"x": 1}]


@pytest.mark.anyio
@pytest.mark.usefixtures("reversing_sealer")
async def test_a_sealer_that_raises_its_own_error_still_sends_the_job_to_the_dlq() -> None:
    namespace = "sealing-buggy-sealer"
    config = {"protocol": "memory", "namespace": namespace}
    try:
        writer = {**config, "seal": {"keys": {"r1": K1}, "sealer": "reverse"}}
        reader = {**config, "seal": {"keys": {"r2": K1}, "sealer": "reverse"}}
        async with Queue(backends={"b": writer}) as w, Queue(backends={"b": reader}) as r:
            await w.enqueue("q", "x")
            result = await r.tick("q", lambda job, ctx: None)
            assert result.moved_to_dlq == 1
            [dead] = await r.dlq_list("q")
            assert dead.last_error is not None
            assert dead.last_error.startswith("queue/unseal-failed")
            assert "RuntimeError" in dead.last_error
    finally:
        MemoryBackend.forget_namespace(namespace)


# -- an unreadable last error ------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_job_whose_last_error_cannot_be_unsealed_still_runs() -> None:
    clock = VirtualClock()
    async with Queue(backends={"b": {"protocol": "memory"}}, clock=clock) as queue:
        job_id = await queue.enqueue("q", "x", max_attempts=2)

        async def boom(job: Job, ctx: JobContext) -> None:
            raise RuntimeError("first attempt")

        await queue.tick("q", boom)
        row = runtime_of(queue).backend._store.jobs[job_id]
        row.last_error = row.last_error[:-8] + "AAAAAAAA"
        clock.advance(1)
        seen: list[str | None] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.last_error)

        assert (await queue.tick("q", record)).succeeded == 1
        assert seen[0] is not None
        assert seen[0].startswith("queue/unseal-failed: the last error could not be unsealed")


# -- the key file ------------------------------------------------------------------------------
def key_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def test_the_key_file_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db.key")
    keys, created = load_or_create_key_file(path)
    assert created
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again, created_again = load_or_create_key_file(path)
    assert (again, created_again) == (keys, False)
    [line] = key_lines(Path(path))
    assert line.split(":", 1)[0] == next(iter(keys))
    assert os.listdir(tmp_path) == ["jobs.db.key"]  # no temporary file left behind


def test_concurrent_first_starts_agree_on_one_private_key(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db.key")
    barrier = threading.Barrier(16)
    results: list[dict[str, bytes]] = []
    lock = threading.Lock()

    def start() -> None:
        barrier.wait()
        keys, _ = load_or_create_key_file(path)
        with lock:
            results.append(keys)

    threads = [threading.Thread(target=start) for _ in range(16)]
    before = os.umask(0)  # the most permissive umask: the file must set its own mode
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        os.umask(before)
    assert len(results) == 16
    assert all(keys == results[0] for keys in results)
    assert len(key_lines(Path(path))) == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_without_hard_links_the_key_file_is_created_with_o_excl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError("this filesystem has no hard links")

    monkeypatch.setattr(os, "link", no_links)
    path = str(tmp_path / "fat.db.key")
    keys, created = load_or_create_key_file(path)
    assert created
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_key_file(path) == (keys, False)


def test_the_key_file_may_hold_several_keys_first_one_sealing(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db.key"
    path.write_text(f"# rotated\nk2:{K2}\nk1:{K1}\n")
    path.chmod(0o600)
    keys, created = load_or_create_key_file(str(path))
    assert not created
    assert list(keys) == ["k2", "k1"]


def test_a_malformed_key_file_is_an_invalid_config_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("blamequeue._sealing._READ_PAUSE", 0.0)
    path = tmp_path / "jobs.db.key"
    path.write_text("k1:tooshort\n")
    with pytest.raises(ConfigError) as info:
        load_or_create_key_file(str(path))
    assert str(path) in info.value.message


def test_a_key_file_others_can_read_is_refused_without_showing_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # More about the key file's mode, owner and links: tests/core/test_key_file_safety.py.
    path = tmp_path / "jobs.db.key"
    path.write_text(f"k1:{K1}\n")
    path.chmod(0o644)
    with caplog.at_level(logging.DEBUG, logger="blamequeue"), pytest.raises(ConfigError) as info:
        load_or_create_key_file(str(path))
    assert "chmod 600" in info.value.message
    assert K1 not in info.value.message
    assert K1 not in caplog.text


@pytest.fixture
def local_db(tmp_path: Path) -> Path:
    pytest.importorskip("blamequeue_local")
    return tmp_path / "jobs.db"


def exists(path: Path | str) -> bool:
    return os.path.exists(path)


@pytest.mark.anyio
async def test_a_local_queue_creates_its_key_file_at_start_not_at_construction(
    local_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue(backends={"b": {"protocol": "local", "path": str(local_db)}})
    key_file = Path(f"{local_db}.key")
    assert not exists(key_file)
    with caplog.at_level(logging.DEBUG, logger="blamequeue"):
        async with queue:
            assert exists(key_file)
            await queue.enqueue("q", {"card": SECRET})
    [line] = key_lines(key_file)
    assert line.split(":", 1)[1] not in caplog.text  # the key is never logged
    assert str(key_file) in caplog.text


@pytest.mark.anyio
async def test_an_explicit_key_means_no_key_file(local_db: Path) -> None:
    config = {"protocol": "local", "path": str(local_db)}
    async with Queue(backends={"b": config}, seal={"keys": {"k1": K1}}) as queue:
        await queue.enqueue("q", 1)
    async with Queue(backends={"b": {**config, "seal": False}}) as queue:
        await queue.enqueue("q", 2)
    assert not exists(f"{local_db}.key")


@pytest.mark.anyio
async def test_the_key_file_survives_restarts_and_moves_to_the_environment(
    local_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"protocol": "local", "path": str(local_db)}
    async with Queue(backends={"b": config}) as queue:
        await queue.enqueue("q", "before the restart")
    [line] = key_lines(Path(f"{local_db}.key"))
    async with Queue(backends={"b": config}) as queue:
        await queue.enqueue("q", "after the restart")
        assert await drain(queue) == ["before the restart", "after the restart"]
    # Rotating to the environment: a new key first, the file's key after it.
    monkeypatch.setenv("BLAMEQUEUE_SEAL_KEYS", f"{new_key_line('fresh')},{line}")
    async with Queue(backends={"b": config}) as queue:
        await queue.enqueue("q", "sealed with the new key")
        await queue.enqueue("q", "ok")
        assert runtime_of(queue).codec.encode_payload(0, W).startswith("bq1:fresh:")
        assert await drain(queue) == ["sealed with the new key", "ok"]


@pytest.fixture
async def memory_queue() -> AsyncIterator[Queue]:
    async with Queue(backends={"b": {"protocol": "memory"}}, clock=VirtualClock()) as queue:
        yield queue


@pytest.mark.anyio
async def test_a_sealed_payload_round_trips_every_json_type(memory_queue: Queue) -> None:
    payload = {"s": "ünïcødé ✓", "i": -(2**40), "f": 1.5, "b": True, "n": None, "l": [1, "2"]}
    await memory_queue.enqueue("q", payload)
    assert await drain(memory_queue) == [payload]


# -- seals bound to their place (SPEC §6) -----------------------------------------------------
def test_a_value_opens_only_in_the_place_it_was_sealed_for() -> None:
    codec = SealedCodec(sealer(k1=b"1" * 32))
    sealed = codec.encode_payload({"card": SECRET}, W)
    assert codec.decode_payload(sealed, W) == {"card": SECRET}
    elsewhere = [
        place("payload", "q", "job-2"),  # another job
        place("payload", "other-queue", "job-1"),  # another queue
        place("result", "q", "job-1"),  # another field
        place("payload", "q", "job-1", None, '{"task":"other"}'),  # rewritten meta
    ]
    for where in elsewhere:
        with pytest.raises(QueueError) as info:
            codec.decode_payload(sealed, where)
        assert info.value.code == "queue/unseal-failed"
        assert "tampered" in info.value.message
        assert SECRET not in info.value.message
    error = codec.decode_error(codec.encode_error(SECRET, W), elsewhere[0])
    assert error is not None
    assert error.startswith("queue/unseal-failed")
    assert SECRET not in error


def test_places_cannot_be_confused_by_where_a_name_ends() -> None:
    assert place("payload", "a:b", "c") != place("payload", "a", "b:c")
    assert place("payload", "a\nb", "") != place("payload", "a", "b")
    assert place("payload", None) == place("payload", "")


def test_a_value_sealed_before_binding_is_refused_unless_accept_unbound() -> None:
    box = sealer(k1=b"1" * 32)
    old = box.seal('{"from":"before"}')  # what an earlier version stored: no place inside
    with pytest.raises(QueueError) as info:
        SealedCodec(box).decode_payload(old, W)
    assert "accept_unbound" in info.value.message
    assert SealedCodec(box, accept_unbound=True).decode_payload(old, W) == {"from": "before"}
    config = parse_seal_config({"keys": {"k1": K1}, "accept_unbound": True}, "seal")
    assert config is not False
    assert config.accept_unbound


def test_a_value_sealed_with_a_key_not_held_raises_seal_key_missing() -> None:
    from blamequeue.errors import SealKeyMissingError

    sealed = SealedCodec(sealer(k2=b"2" * 32)).encode_payload(1, W)
    with pytest.raises(SealKeyMissingError) as info:
        SealedCodec(sealer(k1=b"1" * 32), accept_unsealed=True).decode_payload(sealed, W)
    assert (info.value.code, info.value.key_id) == ("queue/unseal-failed", "k2")


def test_the_sweeps_lease_expired_text_reads_back_on_every_codec() -> None:
    from blamequeue._codec import LEASE_EXPIRED

    assert SealedCodec(sealer(k1=b"1" * 32)).decode_error(LEASE_EXPIRED, W) == LEASE_EXPIRED
    assert JsonCodec().decode_error(LEASE_EXPIRED, W) == LEASE_EXPIRED


@pytest.mark.anyio
async def test_with_context_values_are_sealed_for_their_job() -> None:
    namespace = f"sealing-context-{os.urandom(4).hex()}"
    async with Queue(backends={"b": {"protocol": "memory", "namespace": namespace}}) as queue:
        seen: list[Any] = []

        @queue.task(queue="q", name="greet")
        async def greet(payload: dict[str, Any], ctx: JobContext) -> None:
            seen.append(ctx.job.context)

        first = await queue.job("greet", {}).with_context(user=SECRET).dispatch()
        second = await queue.job("greet", {}).with_context(user="other").dispatch()
        rows = runtime_of(queue).backend._store.jobs
        assert SECRET not in rows[first].meta
        assert '"task": "greet"' in rows[first].meta  # names stay readable
        # Another job's sealed context swapped in, with the payload's binding to it intact,
        # still does not open: the context is bound to its own job.
        stolen = rows[first].meta
        rows[second].meta = stolen
        rows[second].payload = SealedCodec(runtime_of(queue).codec.sealer).encode_payload(
            {}, place("payload", "q", second, None, stolen)
        )
        result = await queue.tick("q", queue.tasks)
        assert (result.succeeded, result.moved_to_dlq, seen) == (1, 1, [{"user": SECRET}])
        [dead] = await queue.dlq_list("q")
        assert dead.job_id == second
        assert dead.last_error is not None
        assert "tampered" in dead.last_error


def test_a_payloads_place_is_the_place_of_its_parts() -> None:
    from blamequeue._codec import payload_place

    for flow, meta in ((None, None), ("flow-1", '{"task":"t","é":1}')):
        assert payload_place("q", "job-1", flow, meta) == place("payload", "q", "job-1", flow, meta)
