"""Core's optional accelerators (``blamequeue._accelerators``): each fits the installed library
(so an upgrade that breaks one fails here, not in production), gives what its portable path
gives, and steps aside, to the portable path, when its probe finds anything off or
``BLAMEQUEUE_PORTABLE=1`` is set.  No probe runs at import."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import nacl.bindings
import pytest

from blamequeue import _accelerators, _codec
from blamequeue._accelerators import (
    PORTABLE_ENV,
    Unfit,
    accelerator,
    json_encoder,
    secretbox_batch,
    secretbox_batch_portable,
)
from blamequeue._sealing import SecretBoxSealer

KEY = bytes(range(32))


@pytest.fixture(autouse=True)
def probe_afresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test probes anew, with ``BLAMEQUEUE_PORTABLE`` unset unless it sets it, and leaves
    the next one to probe anew (and compact_json to pick its encoder again)."""
    monkeypatch.delenv(PORTABLE_ENV, raising=False)

    def forget() -> None:
        json_encoder.forget()
        secretbox_batch.forget()
        _codec._encode = _codec._first_encode

    forget()
    yield
    forget()


# -- the probes accept what is installed ---------------------------------------------------------
def test_the_json_encoder_accelerator_fits_this_python() -> None:
    assert json_encoder(_codec._ENCODER) is not None


def test_the_batch_sealing_accelerator_fits_the_installed_pynacl() -> None:
    assert secretbox_batch() is not None


# -- accelerated and portable paths agree --------------------------------------------------------
_VALUES: list[Any] = [
    {"b": 1, "a": [1.5, -0.0, 10**30, None, True]},
    'caf\u00e9 \u20ac \u2028 "quoted" \\ \n\t\x00',
    [[], {}, "", 0],
    {"nested": {"deeper": [{"x": "y"}]}},
]


@pytest.mark.parametrize("value", _VALUES)
def test_compact_json_is_the_same_text_either_way(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerated = _codec.compact_json(value)
    assert _codec._encode is not _codec._ENCODER.encode  # the accelerator was picked
    _codec._encode = _codec._first_encode
    json_encoder.forget()
    monkeypatch.setenv(PORTABLE_ENV, "1")
    assert _codec.compact_json(value) == accelerated
    assert _codec._encode == _codec._ENCODER.encode  # the portable path was picked
    assert accelerated == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("portable", [False, True], ids=["accelerated", "portable"])
def test_bad_payloads_fail_the_same_way_either_way(
    portable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if portable:
        monkeypatch.setenv(PORTABLE_ENV, "1")
    with pytest.raises(ValueError, match="not JSON compliant"):
        _codec.compact_json({"x": float("nan")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        _codec.compact_json({"x": object()})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises((ValueError, RecursionError)):
        _codec.compact_json(cycle)


def test_batch_sealing_gives_the_bytes_of_the_public_bindings() -> None:
    seal_all = secretbox_batch()
    assert seal_all is not None
    nonces = bytes(range(24)) * 3
    messages = [b"", b"one", "\u20ac".encode() * 1000]
    assert seal_all(KEY, nonces, messages) == secretbox_batch_portable(KEY, nonces, messages)
    assert seal_all(KEY, nonces[:24], [b"x"])[0][24:] == nacl.bindings.crypto_secretbox_easy(
        b"x", nonces[:24], KEY
    )


@pytest.mark.parametrize("portable", [False, True], ids=["accelerated", "portable"])
def test_sealed_batches_open_either_way(portable: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if portable:
        monkeypatch.setenv(PORTABLE_ENV, "1")
    sealer = SecretBoxSealer({"k1": KEY})
    texts = ["", "a", "caf\u00e9" * 500]
    envelopes = sealer.seal_many(texts)
    assert (secretbox_batch() is None) == portable
    assert [sealer.unseal(envelope) for envelope in envelopes] == texts
    assert len(set(envelopes)) == len(texts)  # a nonce of its own each
    assert sealer.seal_many([]) == []


# -- stepping aside --------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["1", "yes", " 1 "])
def test_blamequeue_portable_turns_every_accelerator_off(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PORTABLE_ENV, value)
    assert json_encoder(_codec._ENCODER) is None
    assert secretbox_batch() is None


@pytest.mark.parametrize("value", ["", "0"])
def test_blamequeue_portable_unset_or_0_leaves_them_on(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PORTABLE_ENV, value)
    assert not _accelerators.portable()
    assert secretbox_batch() is not None


def test_a_private_module_gone_leaves_the_portable_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nacl._sodium", None)  # import now raises ImportError
    assert secretbox_batch() is None
    sealer = SecretBoxSealer({"k1": KEY})
    assert sealer.unseal(sealer.seal_many(["still sealed"])[0]) == "still sealed"


def test_a_missing_c_encoder_leaves_the_portable_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)  # a Python without _json
    assert json_encoder(_codec._ENCODER) is None
    assert _codec.compact_json({"a": ["b"]}) == '{"a":["b"]}'


def test_an_accelerator_whose_self_test_disagrees_is_not_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    @accelerator("doubling", key=lambda n: None)
    def wrong(n: int) -> Any:
        calls.append(n)
        raise Unfit("its self-test gave 5, the portable path 4")

    with caplog.at_level(logging.DEBUG, logger="blamequeue"):
        assert wrong(2) is None
        assert wrong(3) is None  # probed once: the answer is kept
    assert calls == [2]
    messages = [r.getMessage() for r in caplog.records if r.name == "blamequeue"]
    assert messages == [
        "doubling: the portable path (Unfit: its self-test gave 5, the portable path 4)"
    ]


def test_which_path_is_used_is_logged_once_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="blamequeue"):
        secretbox_batch()
        secretbox_batch()
    found = [r for r in caplog.records if "batch sealing" in r.getMessage()]
    assert len(found) == 1
    assert found[0].levelno == logging.DEBUG
    assert "the accelerated path" in found[0].getMessage()


def test_importing_blamequeue_runs_no_probe() -> None:
    code = (
        "import blamequeue, blamequeue.abc, blamequeue._sealing\n"
        "from blamequeue import _accelerators as a\n"
        "assert not a.json_encoder._found and not a.secretbox_batch._found\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
