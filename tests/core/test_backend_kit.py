"""The base kit of blamequeue.abc: option reading, the store guard, error maps, settlements."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from blamequeue import _backend_boundary, _backend_kit, _backend_options, abc
from blamequeue.abc import (
    SETTLEMENT_OUTCOMES,
    ErrorMap,
    ErrorRule,
    OptionReader,
    Settlement,
    StoreGuard,
    check_settlements,
    outcome_rule,
    redact_chain,
    storable_text,
)
from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError


def test_every_name_of_the_kit_is_public_in_blamequeue_abc_and_documented() -> None:
    kit = {
        name: getattr(module, name)
        for module in (_backend_boundary, _backend_kit, _backend_options)
        for name in module.__all__
    }
    assert len(kit) == 10
    for name, value in kit.items():
        assert name in abc.__all__
        assert getattr(abc, name) is value
        assert value.__doc__


# -- OptionReader ---------------------------------------------------------------------------
def reader(**options: Any) -> OptionReader:
    return OptionReader(
        options, backend="test backend", known=("path", "timeout", "count", "mode", "tls", "url")
    )


def read_all(**options: Any) -> None:
    read = reader(**options)
    read.path("path", "x")
    read.seconds("timeout", 1.0, high=60)
    read.integer("count", 1, low=1, high=10)
    read.choice("mode", "a", {"a": "first", "b": "second"})
    read.flag("tls", False)
    read.text("url")


def refusal(**options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_all(**options)
    assert info.value.code == "queue/invalid-config"
    assert info.value.message.startswith("test backend: ")
    return info.value


def test_an_unknown_option_is_refused_with_a_did_you_mean() -> None:
    message = refusal(paht="x.db").message
    assert "unknown option(s) 'paht' (did you mean 'path'?)" in message
    assert "'timeout'" in message  # the options it accepts


def test_an_unknown_option_with_nothing_close_is_named_alone() -> None:
    message = refusal(colour="red").message
    assert "unknown option(s) 'colour';" in message


def test_none_means_not_given_so_the_default_applies() -> None:
    read = reader(path=None, timeout=None, count=None, mode=None, tls=None, url=None)
    assert read.path("path", "jobs.db") == "jobs.db"
    assert read.seconds("timeout", 5.0, high=60) == 5.0
    assert read.integer("count", 3, low=1, high=10) == 3
    assert read.choice("mode", "a", {"a": "", "b": ""}) == "a"
    assert read.flag("tls", True) is True
    assert read.text("url", "u") == "u"


def test_good_values_come_back_typed(tmp_path: Path) -> None:
    read = reader(path=tmp_path / "a.db", timeout=2, count=4.0, mode="b", tls="TRUE", url="u")
    assert read.path("path", "x") == str(tmp_path / "a.db")
    assert read.seconds("timeout", 1.0, high=60) == 2.0
    assert read.integer("count", 1, low=1, high=10) == 4
    assert read.choice("mode", "a", {"a": "", "b": ""}) == "b"
    assert read.flag("tls", False, words=True) is True
    assert read.text("url") == "u"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"path": b"x.db"}, "option 'path' must be a non-empty text path"),
        ({"path": ""}, "option 'path' must be a non-empty text path"),
        ({"timeout": math.nan}, "option 'timeout' must be a number of seconds"),
        ({"timeout": True}, "option 'timeout' must be a number of seconds"),
        ({"timeout": 61}, "at most 60"),
        ({"count": 2.5}, "option 'count' must be a whole number between 1 and 10, got 2.5"),
        ({"count": 11}, "between 1 and 10"),
        ({"count": "3"}, "option 'count' must be a whole number"),
        ({"mode": "c"}, "option 'mode' must be 'a' (first) or 'b' (second), got 'c'"),
        ({"tls": "yes"}, "option 'tls' must be True or False"),
        ({"url": ""}, "option 'url' must be a non-empty string, got an empty string"),
        ({"url": 5}, "option 'url' must be a non-empty string, got 5"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option(options: dict[str, Any], fragment: str) -> None:
    assert fragment in refusal(**options).message


def test_a_refused_object_is_shown_by_its_type_not_its_repr() -> None:
    class Secretive:
        def __repr__(self) -> str:
            return "hunter2"

    message = refusal(url=Secretive()).message
    assert "hunter2" not in message
    assert "Secretive" in message


def test_words_for_a_flag_only_when_asked() -> None:
    assert reader(tls="0").flag("tls", True, words=True) is False
    with pytest.raises(ConfigError):
        reader(tls="0").flag("tls", True)


def test_a_required_text_says_what_a_good_value_looks_like() -> None:
    with pytest.raises(ConfigError) as info:
        reader().text("url", required="e.g. 'x://y'")
    assert "option 'url' is required, e.g. 'x://y'" in info.value.message


def test_options_that_contradict_another_are_refused_together() -> None:
    read = reader(path="a", url="u", timeout=None)
    with pytest.raises(ConfigError) as info:
        read.refuse_with("url", ("path", "timeout"), "the url says where")
    assert "option(s) 'path' cannot be combined with 'url': the url says where" in str(info.value)
    reader(url="u").refuse_with("url", ("path",), "")  # nothing given: nothing to refuse


# -- StoreGuard -----------------------------------------------------------------------------
def test_the_guard_refuses_before_open_and_after_close_with_the_same_error() -> None:
    guard = StoreGuard[str](where="test backend 'main'")
    with pytest.raises(QueueError) as before:
        guard.require()
    assert guard.opened("handle") == "handle"
    assert guard.is_open
    assert guard.require() == "handle"
    assert guard.closed() == "handle"
    assert guard.closed() is None  # closing twice is harmless
    with pytest.raises(QueueError) as after:
        guard.require()
    for error in (before.value, after.value):
        assert error.code == "queue/not-initialized"
        assert "test backend 'main' is not open" in error.message
        assert "async with queue" in error.message
    assert str(before.value) == str(after.value)


@pytest.mark.anyio
async def test_the_guard_maps_foreign_errors_chained_and_passes_queue_errors() -> None:
    def mapped(exc: Exception) -> QueueError:
        return BackendUnavailableError(f"mapped {exc}")

    guard = StoreGuard[str](where="w", map_error=mapped)
    cause = ConnectionError("gone")

    async def fails(exc: Exception) -> None:
        raise exc

    with pytest.raises(BackendUnavailableError) as info:
        await guard.call(fails(cause))
    assert info.value.message == "mapped gone"
    assert info.value.__cause__ is cause
    own = BadArgumentError("queue/bad-argument", "mine")
    with pytest.raises(BadArgumentError) as passed:
        await guard.call(fails(own))
    assert passed.value is own

    async def answers() -> int:
        return 7

    assert await guard.call(answers()) == 7


@pytest.mark.anyio
async def test_a_guard_without_a_map_makes_foreign_errors_non_retryable() -> None:
    guard = StoreGuard[str](where="w")

    async def fails() -> None:
        raise RuntimeError("odd")

    with pytest.raises(BackendUnavailableError) as info:
        await guard.call(fails())
    assert not info.value.retryable
    assert "w: the store raised RuntimeError: odd" in info.value.message


# -- ErrorMap -------------------------------------------------------------------------------
ERRORS = ErrorMap(
    ErrorRule(
        when=TimeoutError,
        retryable=True,
        message="{where}: timed out ({text}) during {action}; the call will be retried",
    ),
    ErrorRule(
        when=lambda exc: "denied" in str(exc),
        code="queue/invalid-config",
        message="{where}: access denied ({kind}); fix the credentials",
    ),
    ErrorRule(when=UnicodeError, code="queue/bad-payload", message="{where}: {text}"),
    otherwise=ErrorRule(when=Exception, message="{where}: failed ({kind}: {text})"),
)


def test_a_temporary_failure_is_retryable_backend_unavailable() -> None:
    error = ERRORS.map(TimeoutError("slow"), where="w", action="lease")
    assert type(error) is BackendUnavailableError
    assert error.retryable
    assert error.message == "w: timed out (slow) during lease; the call will be retried"


def test_a_permanent_failure_takes_its_code_and_is_not_retried() -> None:
    error = ERRORS.map(PermissionError("access denied"), where="w", action="x")
    assert type(error) is ConfigError
    assert error.code == "queue/invalid-config"
    assert not error.retryable
    assert ERRORS.map(UnicodeError("bad"), where="w").code == "queue/bad-payload"


def test_what_no_rule_takes_goes_to_otherwise() -> None:
    error = ERRORS.map(KeyError("k"), where="w")
    assert type(error) is BackendUnavailableError
    assert not error.retryable
    assert error.message == "w: failed (KeyError: 'k')"


def test_a_queue_error_is_returned_as_it_is() -> None:
    own = BadArgumentError("queue/bad-argument", "mine")
    assert ERRORS.map(own, where="w") is own


def test_a_bound_map_serves_as_the_guard_s_map_error() -> None:
    error = ERRORS.bind("w", action="settle")(TimeoutError("slow"))
    assert error.message == "w: timed out (slow) during settle; the call will be retried"


def test_redaction_cleans_the_message_and_the_foreign_chain() -> None:
    errors = ErrorMap(
        otherwise=ErrorRule(when=Exception, message="{where}: {text}"),
        redact=lambda text: text.replace("s3cret", "***"),
    )
    inner = ValueError("token s3cret")
    outer = ConnectionError("to redis://:s3cret@host")
    outer.__cause__ = inner
    error = errors.map(outer, where="w")
    assert error.message == "w: to redis://:***@host"
    assert outer.args == ("to redis://:***@host",)
    assert inner.args == ("token ***",)


def test_redact_chain_leaves_clean_exceptions_and_stops_at_cycles() -> None:
    first = ValueError("a", 1)
    second = ValueError("b")
    first.__context__ = second
    second.__context__ = first
    redact_chain(first, str.upper)
    assert first.args == ("A", 1)
    assert second.args == ("B",)


# -- settlements ----------------------------------------------------------------------------
def settlement(outcome: Any, job_id: str = "j", token: str = "t") -> Settlement:
    return Settlement(job_id=job_id, token=token, outcome=outcome, at=1.0)


def test_the_outcome_table_says_where_each_outcome_moves_a_job() -> None:
    table = {
        name: (rule.state, rule.finishes, rule.gives_back_attempt, rule.sets_error)
        for name, rule in SETTLEMENT_OUTCOMES.items()
    }
    assert table == {
        "done": ("done", True, False, False),
        "retry": ("pending", False, False, True),
        "dead": ("dead", True, False, True),
        "release": ("pending", False, True, False),
    }
    assert outcome_rule("dead") is SETTLEMENT_OUTCOMES["dead"]


def test_an_unknown_outcome_is_a_bad_argument() -> None:
    with pytest.raises(BadArgumentError) as info:
        outcome_rule("maybe")
    assert info.value.code == "queue/bad-argument"
    assert "'maybe'" in info.value.message


def test_check_settlements_refuses_the_whole_batch_for_one_unknown_outcome() -> None:
    with pytest.raises(BadArgumentError):
        check_settlements([settlement("done"), settlement("later", job_id="k")])


def test_check_settlements_marks_repeats_of_a_lease_as_stale() -> None:
    batch = [
        settlement("done"),
        settlement("retry"),  # same job and token: a repeat
        settlement("done", token="u"),  # another lease of the same job
        settlement("dead", job_id="k"),
    ]
    assert check_settlements(batch) == [True, False, True, True]
    assert check_settlements([]) == []


def test_storable_text_escapes_unpaired_surrogates_only() -> None:
    assert storable_text("plain é ✓") == "plain é ✓"
    escaped = storable_text("file \udcff name")
    assert escaped == "file \\udcff name"
    escaped.encode("utf-8")
