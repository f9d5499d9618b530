"""Bad input, fuzzed with hypothesis: every rejection is a ``QueueError`` whose code is one of
``blamequeue.errors.ERROR_CODES``, nothing is stored by a rejected call, and no other exception
escapes (SPEC §2 "Errors", §14).  What is accepted round-trips.

Input kinds: payloads, enqueue options, queue names, ``Queue(...)`` configs, the local
backend's identifiers, ``BLAMEQUEUE_*`` environments, rate limits, flow specifications, and
sealed envelopes with bits flipped at rest.  At least 1,000 cases per kind in the bounded form
(``derandomize=True``: the same cases on every run, so CI never flakes), 10,000 in the long one.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import re
import sqlite3
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reliability_report import CALL_FAILED, Tally, current_form

from blamequeue import FlowChild, Job, JobContext, Queue, RateLimit
from blamequeue.errors import ERROR_CODES, QueueError
from blamequeue_local import connect
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

FORM = current_form()
CASES = FORM.pick(1_000, 10_000)
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
Q = "fuzz"
SEAL = {"keys": {"k1": base64.b64encode(bytes(range(32))).decode("ascii")}}
ARGUMENT_CODES = {"queue/bad-argument", "queue/bad-payload"}
CONFIG_CODES = {"queue/invalid-config", "queue/deferred-protocol"}
FLOW_CODES = {"queue/bad-flow", "queue/flow-cycle", "queue/flow-unknown-dep"}


# -- known bugs ----------------------------------------------------------------------------------
@attrs.frozen
class KnownBug:
    """A bug this campaign found and reported; each has a strict-xfail test of its own
    (test_known_bug_*).  A fuzz case that hits it is counted under its name instead of failing
    the fuzz run, so the fuzzing goes on over every other input; once the bug is fixed the
    case simply ends as a QueueError and nothing here matches any more."""

    name: str
    reason: str
    exc_type: type[BaseException]
    file: str
    function: str | None = None
    message: str = ""

    def matches(self, exc: BaseException) -> bool:
        if not isinstance(exc, self.exc_type) or not re.search(self.message, str(exc)):
            return False
        if self.function is None:
            return True
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return frame.filename.endswith(self.file) and frame.name == self.function


# Bugs this campaign found are fixed; a new one is listed here (KnownBug) with a strict-xfail
# test of its own until it is fixed, so fuzzing goes on past it.
KNOWN_BUGS: list[KnownBug] = []


def known_bug(exc: BaseException) -> KnownBug | None:
    return next((bug for bug in KNOWN_BUGS if bug.matches(exc)), None)


class AuditSink:
    """A well-formed audit sink (one object, where a list of them is expected, is a mistake)."""

    async def emit(self, event: object) -> None:
        pass


# -- counting ------------------------------------------------------------------------------------
@attrs.define
class Cases:
    """How many cases one fuzz test tried, and how each ended."""

    tried: int = 0
    accepted: int = 0
    round_trips: int = 0
    codes: collections.Counter[str] = attrs.field(factory=collections.Counter)
    bugs: collections.Counter[str] = attrs.field(factory=collections.Counter)

    def accept(self, *, round_trip: bool = False) -> None:
        self.tried += 1
        self.accepted += 1
        self.round_trips += round_trip

    def reject(self, exc: QueueError, allowed: set[str] | None = None, what: Any = None) -> None:
        """Count a refusal; fail unless it is a QueueError with a known code (and, when
        ``allowed`` is given, one of those) or a known bug."""
        assert isinstance(exc, QueueError)
        assert exc.code in ERROR_CODES
        if allowed is not None and exc.code not in allowed:
            self.escaped(exc, what)
            return
        self.tried += 1
        self.codes[exc.code] += 1

    def escaped(self, exc: BaseException, what: Any = None) -> None:
        """Something other than an allowed QueueError came out: count a known bug, or fail."""
        bug = known_bug(exc)
        if bug is None:
            raise AssertionError(f"{what!r} ended in {type(exc).__name__}: {exc}") from exc
        self.tried += 1
        self.bugs[bug.name] += 1


@pytest.fixture
def cases(request: pytest.FixtureRequest, reliability_tally: Tally) -> Iterator[Cases]:
    counted = Cases()
    yield counted
    kind = request.node.get_closest_marker("fuzz_kind")
    assert kind is not None, "every fuzz test names its input kind"
    loop = request.node.funcargs.get("anyio_backend", "sync")
    spec = getattr(request.node, "callspec", None)
    backend = spec.params.get("fuzz_store", "core") if spec is not None else "core"
    reliability_tally.add(
        f"fuzz: {kind.args[0]}",
        f"{backend}/{loop}",
        enqueued=counted.accepted,
        completed=counted.round_trips,
        tried=counted.tried,
        rejected=counted.tried - counted.accepted - sum(counted.bugs.values()),
        **{f"code {code}": n for code, n in sorted(counted.codes.items())},
        **{f"known bug '{name}'": n for name, n in sorted(counted.bugs.items())},
    )
    if not request.node.stash.get(CALL_FAILED, False):
        assert counted.tried >= CASES, f"only {counted.tried} cases tried"


@pytest.fixture(params=["memory", "local"])
def fuzz_store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "memory":
        return {"protocol": "memory", "namespace": f"fuzz-{uuid.uuid4().hex}"}
    return {"protocol": "local", "path": str(tmp_path / "fuzz.db")}


@pytest.fixture
async def fuzz_queue(fuzz_store: dict[str, Any]) -> AsyncIterator[Queue]:
    async with Queue(backends={"b": fuzz_store}, sweep_interval=0, clock=VirtualClock()) as q:
        yield q


def fresh_queue_name() -> str:
    return f"fuzz-{uuid.uuid4().hex[:12]}"


async def run_once(queue: Queue, queue_name: str = Q) -> list[Job]:
    """Lease and run what is due (one job here), returning what the handler saw."""
    seen: list[Job] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        seen.append(job)

    result = await queue.tick(queue_name, handler, max=10)
    assert result.succeeded == result.leased == len(seen)
    return seen


# -- strategies ------------------------------------------------------------------------------------
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)  # storable text
# Lone surrogates included (plain text() draws them only rarely).
ANY_TEXT = st.text(st.characters(), max_size=30) | st.builds(
    lambda head, odd: head + odd, TEXT, st.characters(categories=["Cs"])
)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
    | ANY_TEXT
)
JSON_LIKE = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(ANY_TEXT | st.integers() | st.booleans() | st.none(), inner, max_size=4)
    ),
    max_leaves=12,
)
STORABLE_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
NOT_JSON_LEAVES = (
    st.builds(object)
    | st.sets(st.integers(), max_size=3)
    | st.frozensets(st.integers(), max_size=3)
    | st.binary(max_size=8)
    | st.binary(max_size=8).map(bytearray)
    | st.complex_numbers(allow_nan=False)
    | st.datetimes()
    | st.decimals(allow_nan=False)
    | st.sampled_from([math.nan, math.inf, -math.inf])
    | st.builds(uuid.uuid4)
    | st.just(Ellipsis)
    | st.just(print)
)
NOT_JSON = st.recursive(
    NOT_JSON_LEAVES,
    lambda inner: (
        st.lists(inner | JSON_SCALARS, min_size=1, max_size=3)
        | st.dictionaries(TEXT, inner, min_size=1, max_size=3)
        | st.dictionaries(st.tuples(st.integers()), JSON_SCALARS, min_size=1, max_size=2)
    ),
    max_leaves=6,
)
JUNK = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | ANY_TEXT
    | st.binary(max_size=8)
    | st.lists(st.integers(), max_size=3)
    | st.dictionaries(TEXT, st.integers(), max_size=3)
    | st.builds(object)
)


def mostly(valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """``valid`` three times in four, else ``bad`` (``|`` would weigh every branch of a
    one_of alike, so a value with many bad branches would almost never be valid)."""
    return st.integers(0, 3).flatmap(lambda n: bad if n == 0 else valid)


def circular() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


def has_non_str_key(value: Any) -> bool:
    """Whether a mapping anywhere in ``value`` has a key that is not a str (JSON would turn
    it into a string, or lose a value to a colliding key)."""
    if isinstance(value, dict):
        return any(not isinstance(k, str) or has_non_str_key(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_non_str_key(item) for item in value)
    return False


def json_or_none(payload: Any) -> str | None:
    """The payload as JSON text, or None when it has none a store can hold (the oracle): JSON
    cannot hold it, its text is not valid Unicode (a lone surrogate has no UTF-8), or JSON
    would change it (a mapping key that is not a str, SPEC §14)."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return None if has_non_str_key(payload) else text


# -- payloads --------------------------------------------------------------------------------------
@pytest.mark.fuzz_kind("payloads")
@FUZZ
@given(payload=JSON_LIKE | NOT_JSON)
@example(payload=10**5000)  # past Python's int-to-text limit
@example(payload=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
@example(payload="a\x00b")
@example(payload={"\x00": "\x00"})
@example(payload=circular())
@example(payload={"name": "caf\udce9"})
async def test_fuzzed_payloads_are_stored_and_read_back_or_refused_as_bad_payload(
    fuzz_queue: Queue, cases: Cases, payload: Any
) -> None:
    before = await fuzz_queue.size(Q)
    text = json_or_none(payload)
    try:
        await fuzz_queue.enqueue(Q, payload)
    except QueueError as exc:
        cases.reject(exc, {"queue/bad-payload"}, payload)
        assert text is None, "a payload JSON can hold was refused"
        assert await fuzz_queue.size(Q) == before
        return
    except Exception as exc:
        cases.escaped(exc, payload)
        assert await fuzz_queue.size(Q) == before
        return
    assert text is not None, "a payload JSON cannot hold was accepted"
    [job] = await run_once(fuzz_queue)
    assert job.payload == json.loads(text)
    cases.accept(round_trip=True)


DEEP = 100_000


async def test_a_payload_nested_deeper_than_the_recursion_limit_is_a_bad_payload(
    fuzz_store: dict[str, Any],
) -> None:
    payload: list[Any] = []
    for _ in range(DEEP):
        payload = [payload]
    async with Queue(backends={"b": fuzz_store}, sweep_interval=0) as queue:
        with pytest.raises(QueueError) as refused:
            await queue.enqueue(Q, payload)
        assert refused.value.code == "queue/bad-payload"
        assert await queue.size(Q) == 0


# -- enqueue options -------------------------------------------------------------------------------
BACKOFFS = (
    st.none()
    | st.lists(st.floats() | st.integers(-5, 400) | JUNK, max_size=4)
    | st.fixed_dictionaries(
        {"strategy": st.sampled_from(["exponential", "fixed", "linear", "schedule"]) | JUNK},
        optional={
            "base": st.floats() | st.integers(-5, 100) | JUNK,
            "factor": st.floats() | st.integers(-5, 10) | JUNK,
            "cap": st.floats() | st.integers(-5, 400) | JUNK,
            "delay": st.floats() | st.integers(-5, 100) | JUNK,
            "step": st.floats() | JUNK,
            "jitter": st.floats() | JUNK,
            "schedule": st.lists(st.floats() | st.integers(-5, 100), max_size=3) | JUNK,
        },
    )
    | st.dictionaries(JUNK.filter(lambda k: k.__hash__ is not None), JUNK, max_size=3)
    | JUNK
)
GOOD_BACKOFFS = (
    st.none()
    | st.lists(st.integers(0, 60), min_size=1, max_size=3)
    | st.fixed_dictionaries({"strategy": st.just("fixed"), "delay": st.integers(0, 60)})
    | st.fixed_dictionaries(
        {"strategy": st.just("exponential")},
        optional={"base": st.floats(0, 10), "factor": st.floats(1, 4), "cap": st.floats(0, 300)},
    )
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "priority": mostly(st.integers(-(2**31), 2**31 - 1), st.integers() | JUNK),
        "delay": mostly(st.just(0) | st.floats(0, 1e6), st.floats() | JUNK),
        "max_attempts": mostly(st.integers(1, 100), st.integers() | JUNK),
        "classification": mostly(st.none() | TEXT, ANY_TEXT | JUNK),
        "trace_id": mostly(st.none() | TEXT, ANY_TEXT | JUNK),
        "backoff": mostly(GOOD_BACKOFFS, BACKOFFS),
    },
)


@pytest.mark.fuzz_kind("enqueue options")
@FUZZ
@given(options=OPTIONS)
@example(options={"max_attempts": 2**63})
@example(options={"max_attempts": 2**64 + 1})
@example(options={"backoff": {"strategy": ["exponential"]}})
@example(options={"backoff": {"strategy": "fixed", "delay": 1, 1: 2}})
@example(options={"delay": 1e308})
async def test_fuzzed_enqueue_options_are_stored_or_refused_as_bad_arguments(
    fuzz_queue: Queue, cases: Cases, options: dict[str, Any]
) -> None:
    before = await fuzz_queue.size(Q)
    try:
        job_id = await fuzz_queue.enqueue(Q, {"n": 1}, **options)
    except QueueError as exc:
        cases.reject(exc, ARGUMENT_CODES, options)
        assert await fuzz_queue.size(Q) == before
        return
    except Exception as exc:
        cases.escaped(exc, options)
        assert await fuzz_queue.size(Q) == before
        return
    assert await fuzz_queue.size(Q) == before + 1
    if options.get("delay", 0) == 0:
        [job] = await run_once(fuzz_queue)
        assert job.id == job_id
        assert job.priority == options.get("priority", 0)
        assert job.classification == options.get("classification")
        assert job.trace_id == options.get("trace_id")
        cases.accept(round_trip=True)
    else:
        assert await fuzz_queue.purge(Q) == 1
        cases.accept()


# -- queue names -----------------------------------------------------------------------------------
NAMES = (
    TEXT
    | st.text(min_size=1, max_size=250)
    | st.text(st.characters(max_codepoint=40), max_size=5)
    | st.sampled_from(["", " ", "\t", "a\x00b", "emails", "x" * 200, "x" * 201, "é", "🙂"])
    | JUNK
)


@pytest.mark.fuzz_kind("queue names")
@FUZZ
@given(name=NAMES)
async def test_fuzzed_queue_names_work_everywhere_or_are_refused_before_anything_is_stored(
    fuzz_queue: Queue, cases: Cases, name: Any
) -> None:
    try:
        await fuzz_queue.enqueue(name, {"n": 1})
    except Exception as exc:
        if not isinstance(exc, QueueError):
            cases.escaped(exc, name)
            return
        cases.reject(exc, ARGUMENT_CODES, name)
        for call in (fuzz_queue.size, fuzz_queue.dlq_size, fuzz_queue.purge):
            with pytest.raises(QueueError) as again:
                await call(name)
            assert again.value.code in ARGUMENT_CODES
        return
    assert await fuzz_queue.size(name) == 1
    [job] = await run_once(fuzz_queue, name)
    assert job.queue == name
    assert (await fuzz_queue.size(name), await fuzz_queue.dlq_size(name)) == (0, 0)
    cases.accept(round_trip=True)


# -- Queue(...) configs ----------------------------------------------------------------------------
NUMBERS = st.floats() | st.integers(-3, 100)
GOOD_CONFIG = st.fixed_dictionaries(
    {"protocol": st.sampled_from(["memory", "local"])},
    optional={
        "max_attempts": st.integers(1, 10),
        "retain_done": st.floats(0, 1e6),
        "retry": st.fixed_dictionaries(
            {}, optional={"attempts": st.integers(1, 5), "base": st.floats(0, 1)}
        ),
        "breaker": st.fixed_dictionaries(
            {}, optional={"failure_threshold": st.integers(1, 5), "reset_timeout": st.floats(0, 60)}
        ),
        "backoff": st.none() | st.lists(st.integers(0, 60), min_size=1, max_size=3),
        "seal": st.none() | st.booleans() | st.just(SEAL),
    },
)
MESSY_CONFIG = st.fixed_dictionaries(
    {"protocol": st.sampled_from(["memory", "local", "amqp", "nats", "redis", "sqs"]) | JUNK},
    optional={
        "max_attempts": st.integers(-2, 10) | JUNK,
        "retain_done": NUMBERS | JUNK,
        "retry": st.fixed_dictionaries(
            {}, optional={"attempts": st.integers(-1, 5) | JUNK, "base": NUMBERS | JUNK}
        )
        | st.dictionaries(JUNK.filter(lambda k: k.__hash__ is not None), JUNK, max_size=2)
        | JUNK,
        "breaker": st.fixed_dictionaries(
            {}, optional={"failure_threshold": NUMBERS | JUNK, "reset_timeout": NUMBERS | JUNK}
        )
        | st.dictionaries(JUNK.filter(lambda k: k.__hash__ is not None), JUNK, max_size=2)
        | JUNK,
        "backoff": BACKOFFS,
        "seal": st.none() | st.booleans() | st.just(SEAL) | JUNK,
        "namespace": TEXT | JUNK,
        "path": st.just("jobs.db") | JUNK,
        "table": st.just("jobs") | JUNK,
        "busy_timeout": NUMBERS | JUNK,
        "durability": st.sampled_from(["normal", "full"]) | JUNK,
        "url": st.just("redis://127.0.0.1:6379/0") | JUNK,
    },
).flatmap(
    lambda config: st.dictionaries(
        JUNK.filter(lambda k: k.__hash__ is not None), JUNK, max_size=2
    ).map(lambda extra: {**extra, **config})
)
NAME = st.sampled_from(["b", "c"]) | TEXT | JUNK.filter(lambda k: k.__hash__ is not None)
BACKENDS = mostly(
    st.dictionaries(st.sampled_from(["b", "c"]), GOOD_CONFIG, min_size=1, max_size=2),
    st.dictionaries(NAME, GOOD_CONFIG | MESSY_CONFIG | JUNK, max_size=3) | JUNK,
)


@pytest.mark.fuzz_kind("Queue configs")
@FUZZ
@given(
    backends=BACKENDS,
    default=mostly(st.none() | st.sampled_from(["b", "c"]), TEXT | JUNK),
    sweep=mostly(st.floats(0, 100), NUMBERS | JUNK),
    seal=st.none() | st.booleans() | st.just(SEAL) | st.dictionaries(TEXT, JUNK, max_size=2),
    audit_sinks=mostly(st.just(()) | st.just([AuditSink()]), st.just(AuditSink()) | JUNK),
)
def test_fuzzed_queue_configs_build_or_are_refused_as_invalid_config_without_io(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cases: Cases,
    backends: Any,
    default: Any,
    sweep: Any,
    seal: Any,
    audit_sinks: Any,
) -> None:
    monkeypatch.chdir(tmp_path)  # a local backend's default path is ./blamequeue.db
    config = (backends, default, sweep, seal, audit_sinks)
    try:
        Queue(
            backends=backends,
            default_backend=default,
            sweep_interval=sweep,
            seal=seal,
            audit_sinks=audit_sinks,
        )
    except QueueError as exc:
        cases.reject(exc, CONFIG_CODES, config)
    except Exception as exc:
        cases.escaped(exc, config)
    else:
        cases.accept()
    assert not list(tmp_path.iterdir()), "building a Queue does no I/O"


# -- local backend identifiers ---------------------------------------------------------------------
IDENTIFIERS = (
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,62}", fullmatch=True)
    | TEXT
    | st.sampled_from(
        [
            'jobs"; DROP TABLE x; --',
            "jobs]",
            "main.jobs",
            "sqlite_master",
            "SQLITE_jobs",
            "a" * 63,
            "a" * 64,
            "temp",
            "main",
            "1jobs",
            "jobs ",
            "jöbs",
        ]
    )
    | JUNK
)


@pytest.mark.fuzz_kind("local identifiers")
@FUZZ
@given(table=IDENTIFIERS, schema=st.none() | IDENTIFIERS)
async def test_fuzzed_table_and_schema_names_are_used_quoted_or_refused_as_invalid_config(
    tmp_path: Path, cases: Cases, table: Any, schema: Any
) -> None:
    db = tmp_path / "identifiers.db"
    config = {"protocol": "local", "path": str(db), "table": table, "schema": schema}
    try:
        queue = Queue(backends={"b": config}, sweep_interval=0)
    except QueueError as exc:
        cases.reject(exc, {"queue/invalid-config"}, (table, schema))
        return
    except Exception as exc:
        cases.escaped(exc, (table, schema))
        return
    async with queue:
        await queue.enqueue(Q, {"n": 1})
        assert len(await run_once(queue)) == 1
    connection = sqlite3.connect(db)
    try:
        # The table is exactly the name given (in main or temp): nothing else was created.
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    finally:
        connection.close()
    if (schema or "main").lower() == "main":
        # SQLite names are case-insensitive: "Jobs" is the table an earlier case made as "jobs".
        assert table.lower() in {name.lower() for name in names}
    cases.accept(round_trip=True)


# -- BLAMEQUEUE_* environments ---------------------------------------------------------------------
ENV_NAMES = st.sampled_from(
    [
        "BLAMEQUEUE_PROTOCOL",
        "BLAMEQUEUE_LOCAL_PATH",
        "BLAMEQUEUE_REDIS_URL",
        "BLAMEQUEUE_REDIS_USERNAME",
        "BLAMEQUEUE_REDIS_PASSWORD",
        "BLAMEQUEUE_REDIS_TLS",
        "BLAMEQUEUE_REDIS_KEY_PREFIX",
        "BLAMEQUEUE_SQS_QUEUE_URL",
        "BLAMEQUEUE_SQS_REGION",
        "BLAMEQUEUE_SQS_ENDPOINT_URL",
        "BLAMEQUEUE_SEAL_KEYS",
        "BLAMEQUEUE_SWEEP_INTERVAL",
    ]
) | st.text(max_size=12)
ENV_VALUES = st.sampled_from(
    [
        "local",
        "memory",
        "redis",
        "sqs",
        "amqp",
        "nats",
        "",
        " ",
        "1",
        "true",
        "maybe",
        "nan",
        "inf",
        "-1",
        "1e400",
        "0.5",
        "redis://127.0.0.1:6379/0",
        "rediss://h:1/0",
        "k1:" + SEAL["keys"]["k1"],
        "k1:" + SEAL["keys"]["k1"] + ",k1:" + SEAL["keys"]["k1"],
        "k1:c2hvcnQ=",
        "k1:not base64!",
        ":",
        ",,,",
    ]
) | st.text(max_size=40)


@pytest.mark.fuzz_kind("BLAMEQUEUE_* environments")
@FUZZ
@given(env=st.dictionaries(ENV_NAMES, ENV_VALUES, max_size=6))
def test_fuzzed_environments_build_a_queue_or_are_refused_as_invalid_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cases: Cases, env: dict[str, str]
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        Queue.from_env(env)
    except QueueError as exc:
        cases.reject(exc, CONFIG_CODES, env)
    except Exception as exc:
        cases.escaped(exc, env)
    else:
        cases.accept()
    assert not list(tmp_path.iterdir()), "building a Queue does no I/O"


# -- rate limits -----------------------------------------------------------------------------------
RATE_LIMITS = mostly(
    st.none()
    | st.builds(RateLimit, max=st.integers(1, 100), per_seconds=st.floats(0.001, 100))
    | st.fixed_dictionaries({"max": st.integers(1, 100), "per_seconds": st.floats(0.001, 100)}),
    st.fixed_dictionaries(
        {},
        optional={
            "max": st.integers(-2, 100) | JUNK,
            "per_seconds": st.floats() | st.integers(-2, 100) | JUNK,
        },
    )
    | st.dictionaries(JUNK.filter(lambda k: k.__hash__ is not None), JUNK, max_size=3)
    | JUNK,
)


@pytest.mark.fuzz_kind("rate limits")
@FUZZ
@given(rate_limit=RATE_LIMITS)
@example(rate_limit={1: 2, "max": 3})
@example(rate_limit={"max": 1, "per_seconds": 1, "burst": 2})
async def test_fuzzed_rate_limits_start_a_consumer_or_are_refused_as_bad_arguments(
    fuzz_queue: Queue, cases: Cases, rate_limit: Any
) -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        pass

    try:
        consumer = await fuzz_queue.consume(Q, handler, rate_limit=rate_limit)
    except QueueError as exc:
        cases.reject(exc, {"queue/bad-argument"}, rate_limit)
        return
    except Exception as exc:
        cases.escaped(exc, rate_limit)
        return
    consumer.cancel()
    with anyio.fail_after(30):
        await consumer.wait_stopped()
    cases.accept()


def test_rate_limit_keyword_errors_are_bad_arguments() -> None:
    with pytest.raises(QueueError) as refused:
        RateLimit(max=0, per_seconds=1)
    assert refused.value.code == "queue/bad-argument"
    with pytest.raises(QueueError):
        RateLimit(max=1, per_seconds=math.nan)


# -- flow specifications ---------------------------------------------------------------------------
FLOW_FAULTS = {
    None: None,
    "cycle": "queue/flow-cycle",
    "unknown dependency": "queue/flow-unknown-dep",
    "duplicate name": "queue/bad-flow",
    "empty name": "queue/bad-flow",
    "bad priority": "queue/bad-argument",
    "bad payload": "queue/bad-payload",
}


@st.composite
def flow_specs(draw: st.DrawFn) -> tuple[list[Any], str | None]:
    """A well-formed graph (each child depends on earlier ones), then maybe one fault in it;
    returns the children and the code the fault must be refused with (None: accepted)."""
    size = draw(st.integers(1, 6))
    names = [f"step-{n}" for n in range(size)]
    children: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        earlier = names[:index]
        depends = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        children.append({"name": name, "payload": draw(STORABLE_JSON), "depends_on": depends})
    fault = draw(st.sampled_from(sorted(FLOW_FAULTS, key=str)))
    victim = children[draw(st.integers(0, size - 1))]
    if fault == "cycle":
        first = children[0]
        if size == 1:
            first["depends_on"] = [first["name"]]
        else:
            last = children[-1]
            first["depends_on"] = [last["name"]]
            if first["name"] not in last["depends_on"]:
                last["depends_on"] = [*last["depends_on"], first["name"]]
    elif fault == "unknown dependency":
        victim["depends_on"] = [*victim["depends_on"], "no-such-step"]
    elif fault == "duplicate name":
        children.append(dict(children[0]))
    elif fault == "empty name":
        children[-1]["name"] = ""  # the last child: no sibling names it
    elif fault == "bad priority":
        victim["priority"] = draw(st.floats() | st.text(max_size=3) | st.just(2**40))
    elif fault == "bad payload":
        victim["payload"] = draw(NOT_JSON.filter(lambda payload: json_or_none(payload) is None))
    as_objects = draw(st.booleans())
    shaped = [FlowChild(**child) if as_objects else child for child in children]
    return shaped, FLOW_FAULTS[fault]


MESSY_CHILD = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", ""]) | JUNK},
    optional={
        "payload": JSON_LIKE | NOT_JSON,
        "depends_on": st.lists(st.sampled_from(["a", "b"]) | JUNK, max_size=3) | JUNK,
        "priority": st.integers(-3, 3) | JUNK,
        "max_attempts": st.integers(-1, 5) | JUNK,
        "classification": st.none() | TEXT | JUNK,
        "trace_id": st.none() | TEXT | JUNK,
        "extra": JUNK,
    },
)
FLOWS = flow_specs() | st.tuples(
    st.lists(MESSY_CHILD | JUNK, max_size=4)
    | st.dictionaries(TEXT, MESSY_CHILD, max_size=2)
    | JUNK,
    st.just("unknown"),
)


@pytest.mark.fuzz_kind("flow specifications")
@FUZZ
@given(spec=FLOWS)
async def test_fuzzed_flow_specifications_register_whole_or_are_refused_with_nothing_stored(
    fuzz_queue: Queue, cases: Cases, spec: tuple[Any, str | None]
) -> None:
    children, expected = spec
    q = fresh_queue_name()  # each case on a queue of its own: a failure cannot spill over
    before = await fuzz_queue.size(q)
    try:
        result = await fuzz_queue.enqueue_flow(q, children)
    except QueueError as exc:
        allowed = FLOW_CODES | ARGUMENT_CODES if expected == "unknown" else {str(expected)}
        cases.reject(exc, allowed, children)
        assert await fuzz_queue.size(q) == before
        return
    except Exception as exc:
        cases.escaped(exc, children)
        assert await fuzz_queue.size(q) == before
        return
    assert expected in (None, "unknown"), f"a flow with a fault was accepted: {children!r}"
    assert [job.name for job in result.jobs] == [
        child.name if isinstance(child, FlowChild) else child["name"] for child in children
    ]
    status = await fuzz_queue.flow_status(result.flow_id)
    due = sum(1 for child in status.children if child.state == "pending")
    assert due == sum(
        1
        for child in children
        if not (child.depends_on if isinstance(child, FlowChild) else child.get("depends_on"))
    )
    assert await fuzz_queue.size(q) == before + len(children)
    assert await fuzz_queue.purge(q) == len(children)
    cases.accept()


# -- sealed envelopes at rest ----------------------------------------------------------------------
def flip(envelope: str, bit: int) -> str:
    """The envelope with one bit of its sealed bytes (nonce, MAC or ciphertext) flipped."""
    head, _, body = envelope.rpartition(":")
    raw = bytearray(base64.b64decode(body))
    bit %= len(raw) * 8
    raw[bit // 8] ^= 1 << (bit % 8)
    return f"{head}:{base64.b64encode(bytes(raw)).decode('ascii')}"


MUTATIONS = (
    st.tuples(st.just("flip"), st.integers(min_value=0))
    # A well-formed id of a key this process lacks ("bq1:k2:") is released, not dead-lettered,
    # and stops the worker: tests/core/test_sealing.py and the conformance suite test that.
    | st.tuples(st.just("header"), st.sampled_from(["bq2:k1:", "bq1:k/2:", "bq1::", "", "bq1:k1"]))
    | st.tuples(st.just("replace"), TEXT)
    | st.tuples(st.just("truncate"), st.integers(min_value=0))
)


@pytest.fixture
async def sealed_queue(tmp_path: Path) -> AsyncIterator[tuple[Queue, sqlite3.Connection]]:
    connection = connect(tmp_path / "sealed.db")
    try:
        config = {"protocol": "local", "store": connection}
        async with Queue(backends={"b": config}, seal=SEAL, sweep_interval=0) as queue:
            yield queue, connection
    finally:
        connection.close()


@pytest.mark.fuzz_kind("sealed envelopes")
@FUZZ
@given(payload=STORABLE_JSON, mutation=MUTATIONS)
async def test_a_sealed_payload_altered_at_rest_is_dead_lettered_as_unseal_failed(
    sealed_queue: tuple[Queue, sqlite3.Connection],
    cases: Cases,
    payload: Any,
    mutation: tuple[str, Any],
) -> None:
    queue, connection = sealed_queue
    job_id = await queue.enqueue(Q, payload)
    [(envelope,)] = connection.execute(
        "SELECT payload FROM blamequeue_jobs WHERE id = ?", (job_id,)
    ).fetchall()
    assert envelope.startswith("bq1:k1:")
    how, value = mutation
    if how == "flip":
        altered = flip(envelope, value)
    elif how == "header":
        altered = value + envelope.split(":", 2)[2]
    elif how == "truncate":
        altered = envelope[: value % len(envelope)]
    else:
        altered = value
    assert altered != envelope
    connection.execute("UPDATE blamequeue_jobs SET payload = ? WHERE id = ?", (altered, job_id))

    ran: list[Job] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.append(job)

    result = await queue.tick(Q, handler)
    assert not ran, "an altered payload never reaches a handler"
    assert (result.leased, result.failed, result.moved_to_dlq) == (1, 1, 1)
    [dead] = await queue.dlq_list(Q)
    assert dead.job_id == job_id
    assert dead.payload is None
    assert dead.last_error is not None
    assert dead.last_error.startswith("queue/unseal-failed")
    assert await queue.dlq_purge(Q) == 1
    assert await queue.size(Q) == 0
    cases.reject(QueueError("queue/unseal-failed", dead.last_error))


# -- the known bugs, one strict xfail each --------------------------------------------------------
def bug_param(name: str, *values: Any) -> Any:
    """A case of a bug this campaign found, fixed since: kept as a regression test."""
    return pytest.param(*values, id=name)


MEMORY = {"protocol": "memory"}


@pytest.mark.parametrize(
    "arguments",
    [
        bug_param("unhashable default_backend", {"backends": {"b": MEMORY}, "default_backend": []}),
        bug_param(
            "non-iterable audit_sinks", {"backends": {"b": MEMORY}, "audit_sinks": AuditSink()}
        ),
        bug_param(
            "unhashable backoff strategy",
            {"backends": {"b": {**MEMORY, "backoff": {"strategy": ["fixed"], "delay": 1}}}},
        ),
        bug_param(
            "mixed-type keys in retry/breaker options",
            {"backends": {"b": {**MEMORY, "retry": {1: 2, "x": 3}}}},
        ),
        bug_param(
            "mixed-type keys in memory options", {"backends": {"b": {**MEMORY, 1: 2, "x": 3}}}
        ),
    ],
)
def test_found_bug_a_bad_queue_config_is_refused_as_invalid_config(
    arguments: dict[str, Any],
) -> None:
    with pytest.raises(QueueError) as refused:
        Queue(**arguments)
    assert refused.value.code == "queue/invalid-config"


@pytest.mark.parametrize(
    ("store", "call"),
    [
        bug_param(
            "unhashable backoff strategy",
            "memory",
            lambda q: q.enqueue(Q, {}, backoff={"strategy": ["fixed"], "delay": 1}),
        ),
        bug_param(
            "mixed-type keys in rate_limit",
            "memory",
            lambda q: q.consume(Q, run_once, rate_limit={1: 2, "max": 3}),
        ),
        bug_param(
            "max_attempts past SQLite INTEGER",
            "local",
            lambda q: q.enqueue(Q, {}, max_attempts=2**63),
        ),
        bug_param("lone surrogate in a payload", "memory", lambda q: q.enqueue(Q, "caf\udce9")),
        bug_param("lone surrogate in a payload", "local", lambda q: q.enqueue(Q, "caf\udce9")),
    ],
)
async def test_found_bug_a_bad_call_is_refused_as_a_bad_argument_with_nothing_stored(
    tmp_path: Path, store: str, call: Any
) -> None:
    config = MEMORY if store == "memory" else {"protocol": "local", "path": str(tmp_path / "b.db")}
    async with Queue(backends={"b": config}, sweep_interval=0) as queue:
        with pytest.raises(QueueError) as refused:
            await call(queue)
        assert refused.value.code in ARGUMENT_CODES, refused.value
        assert await queue.size(Q) == 0


async def test_a_lone_surrogate_is_refused_as_a_bad_payload_where_payloads_are_not_sealed(
    tmp_path: Path,
) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "plain.db"), "seal": False}
    async with Queue(backends={"b": config}, sweep_interval=0) as queue:
        with pytest.raises(QueueError) as refused:
            await queue.enqueue(Q, {"name": "caf\udce9"})
        assert refused.value.code == "queue/bad-payload"
        assert await queue.size(Q) == 0
