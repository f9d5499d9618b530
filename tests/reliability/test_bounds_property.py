"""Bounds (SPEC §14), driven with hostile values through every public entry: the Python API
(enqueue, enqueue_many, flows, the task builder, batches, schedules, consume / tick options,
results, ``Queue(...)`` and backend options), ``Queue.from_env``, the CLI and the dashboard.

* Every duration is a number of seconds, finite and at most ten years (``MAX_SECONDS``): NaN,
  infinities, 1e308, negatives, huge ints, bools, strings and ten years and a second are
  ``queue/bad-argument`` for a call, ``queue/invalid-config`` for a configuration.
* A payload whose JSON is over the backend's ``max_payload_bytes`` is
  ``queue/payload-too-large``; a mapping key that is not a str (``{1: "a", "1": "b"}`` would
  lose a value) is ``queue/bad-payload``.  One bad item refuses a whole batch.
* Each refusal stores nothing, and a time no check lets through any more (a far-future
  ``available_at`` written to the store directly) still reads back everywhere.

Cases are drawn with ``derandomize=True`` (the same on every run) and few per property, so the
whole module stays fast; ``tests/reliability/test_bad_input.py`` fuzzes the wider input space.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blamequeue import FlowChild, Job, JobContext, Queue, RateLimit, dashboard_app, task
from blamequeue._validation import MAX_SECONDS
from blamequeue.errors import QueueError
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

sys.path.append(str(Path(__file__).parents[1] / "cli"))
from cli_helpers import command, environment, sizes  # noqa: E402

Q = "bounds"
SEAL = {"keys": {"k1": base64.b64encode(bytes(range(32))).decode("ascii")}}
SMALL = 64  # the max_payload_bytes of the payload tests: oversize is cheap to build
FEW = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# -- hostile values ---------------------------------------------------------------------------
#: Not a duration anywhere: each is refused whether zero is allowed or not.
BAD_SECONDS = (
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            1e308,
            -1e308,
            -1,
            -1e-9,
            10**400,
            -(10**400),
            2**63,
            1e12,
            MAX_SECONDS + 1,
            True,
            False,
            "1",
            b"1",
            [1],
            {"seconds": 1},
            object(),
        ]
    )
    | st.floats(min_value=MAX_SECONDS, exclude_min=True)
    | st.floats(max_value=0, exclude_max=True)
    | st.integers(min_value=int(MAX_SECONDS) + 1)
    | st.integers(max_value=-1)
)
#: Keys JSON would turn into strings (and so maybe into a key the mapping has already).
NON_STR_KEYS = st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)


@st.composite
def payloads_that_lose_keys(draw: st.DrawFn) -> Any:
    """A JSON-encodable payload with a non-str key somewhere, often colliding with a str one."""
    key = draw(NON_STR_KEYS)
    as_json = json.dumps({key: 0})[2:].split('"')[0]
    mapping: dict[Any, Any] = {key: "a"}
    if draw(st.booleans()):
        mapping[as_json] = "b"  # {1: "a", "1": "b"}: JSON keeps one
    nest = draw(st.integers(0, 3))
    payload: Any = mapping
    for level in range(nest):
        payload = [payload] if level % 2 else {"inner": payload, "n": level}
    return payload


async def _noop(job: Job, ctx: JobContext) -> None:
    return None


@task(name="later", queue=Q)
async def later(payload: Any, ctx: JobContext) -> None:
    return None


def _store(kind: str, tmp_path: Path, **options: Any) -> dict[str, Any]:
    if kind == "memory":
        return {"protocol": "memory", "namespace": f"bounds-{uuid.uuid4().hex}", **options}
    return {"protocol": "local", "path": str(tmp_path / f"{uuid.uuid4().hex}.db"), **options}


@pytest.fixture(params=["memory", "local"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def queue(store_kind: str, tmp_path: Path) -> AsyncIterator[Queue]:
    q = Queue(
        backends={"b": _store(store_kind, tmp_path, max_payload_bytes=SMALL)},
        sweep_interval=0,
        clock=VirtualClock(),
    )

    @q.task(name="t", queue=Q)
    async def t(payload: Any, ctx: JobContext) -> None:
        return None

    async with q:
        yield q


async def nothing_stored(q: Queue) -> None:
    assert await q.size(Q) == 0
    assert await q.dlq_size(Q) == 0
    assert (await q.list_jobs(Q)).jobs == []
    assert await q.batches() == []


async def refused(call: Awaitable[Any] | Callable[[], Any], code: str) -> QueueError:
    """The QueueError ``call`` (a coroutine, or a function returning one or a value) raised;
    fails unless it has ``code`` and a message."""
    caught: QueueError | None = None
    try:
        result = call() if callable(call) else call
        if isinstance(result, Awaitable):
            await result
    except QueueError as exc:
        caught = exc
    assert caught is not None, f"accepted; expected {code}"
    assert caught.code == code, f"{caught.code}: {caught.message}"
    assert caught.message
    return caught


# -- durations: a call's arguments -------------------------------------------------------------
CALLS: dict[str, Callable[[Queue, Any], Any]] = {
    "enqueue delay": lambda q, v: q.enqueue(Q, {}, delay=v),
    "enqueue timeout": lambda q, v: q.enqueue(Q, {}, timeout=v),
    "enqueue unique_for": lambda q, v: q.enqueue(Q, {}, unique_key="k", unique_for=v),
    "enqueue backoff fixed": lambda q, v: q.enqueue(
        Q, {}, backoff={"strategy": "fixed", "delay": v}
    ),
    "enqueue backoff cap": lambda q, v: q.enqueue(
        Q, {}, backoff={"strategy": "exponential", "cap": v}
    ),
    "enqueue backoff base": lambda q, v: q.enqueue(
        Q, {}, backoff={"strategy": "linear", "base": v}
    ),
    "enqueue backoff schedule": lambda q, v: q.enqueue(Q, {}, backoff=[1, v]),
    "enqueue_many delay": lambda q, v: q.enqueue_many(Q, [{}, {}], delay=v),
    "enqueue_many timeout": lambda q, v: q.enqueue_many(Q, [{}, {}], timeout=v),
    "builder delay": lambda q, v: q.job("t", {}).delay(v).dispatch(),
    "builder timeout": lambda q, v: q.job("t", {}).timeout(v).dispatch(),
    "builder backoff": lambda q, v: q.job("t", {}).backoff([v]).dispatch(),
    "consume lease": lambda q, v: q.consume(Q, _noop, lease=v),
    "consume poll_interval": lambda q, v: q.consume(Q, _noop, poll_interval=v),
    "consume fast_poll": lambda q, v: q.consume(Q, _noop, fast_poll=v),
    "consume rate limit": lambda q, v: q.consume(
        Q, _noop, rate_limit=RateLimit(max=1, per_seconds=v)
    ),
    "tick lease": lambda q, v: q.tick(Q, _noop, lease=v),
    "result timeout": lambda q, v: q.result("job-01J0ZK5V3G9YB6R2W8X4T1QH7C", timeout=v),
    "prune_batches": lambda q, v: q.prune_batches(older_than=v),
}


@pytest.mark.parametrize("entry", sorted(CALLS))
@FEW
@given(value=BAD_SECONDS)
async def test_a_duration_out_of_bounds_is_a_bad_argument_and_stores_nothing(
    queue: Queue, entry: str, value: Any
) -> None:
    await refused(lambda: CALLS[entry](queue, value), "queue/bad-argument")
    await nothing_stored(queue)


@FEW
@given(value=BAD_SECONDS)
async def test_a_task_s_dispatch_after_out_of_bounds_is_a_bad_argument(
    queue: Queue, value: Any
) -> None:
    queue.register(later)
    await refused(lambda: later.dispatch_after(value, {}), "queue/bad-argument")
    await nothing_stored(queue)


@FEW
@given(value=BAD_SECONDS)
async def test_extend_lease_out_of_bounds_is_a_bad_argument(queue: Queue, value: Any) -> None:
    seen: list[str] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        try:
            await ctx.extend_lease(value)
        except QueueError as exc:
            seen.append(exc.code)

    await queue.enqueue(Q, {})
    result = await queue.tick(Q, handler)
    assert result.succeeded == 1
    assert seen == ["queue/bad-argument"]
    assert await queue.size(Q) == 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, MAX_SECONDS + 1, 10**400, True])
async def test_shutdown_with_a_timeout_out_of_bounds_is_a_bad_argument(
    queue: Queue, value: Any
) -> None:
    await refused(queue.shutdown(timeout=value), "queue/bad-argument")


async def test_ten_years_is_the_longest_duration_accepted(queue: Queue) -> None:
    await queue.enqueue(Q, {}, delay=MAX_SECONDS, timeout=MAX_SECONDS)
    [info] = (await queue.list_jobs(Q)).jobs
    waits = info.job.available_at - info.job.created_at
    assert waits.total_seconds() == MAX_SECONDS


# -- durations: configuration --------------------------------------------------------------------
CONFIGS: dict[str, Callable[[Any, Path], Queue]] = {
    "sweep_interval": lambda v, p: Queue(backends={"b": _store("memory", p)}, sweep_interval=v),
    "retain_done": lambda v, p: Queue(backends={"b": _store("memory", p, retain_done=v)}),
    "backend backoff": lambda v, p: Queue(
        backends={"b": _store("memory", p, backoff={"strategy": "fixed", "delay": v})}
    ),
    "retry base": lambda v, p: Queue(backends={"b": _store("memory", p, retry={"base": v})}),
    "retry cap": lambda v, p: Queue(backends={"b": _store("memory", p, retry={"cap": v})}),
    "breaker reset_timeout": lambda v, p: Queue(
        backends={"b": _store("memory", p, breaker={"reset_timeout": v})}
    ),
    "local busy_timeout": lambda v, p: Queue(backends={"b": _store("local", p, busy_timeout=v)}),
}


@pytest.mark.parametrize("entry", sorted(CONFIGS))
@FEW
@given(value=BAD_SECONDS)
def test_a_configured_duration_out_of_bounds_is_invalid_config(
    entry: str, value: Any, tmp_path: Path
) -> None:
    with pytest.raises(QueueError) as caught:
        CONFIGS[entry](value, tmp_path)
    assert caught.value.code == "queue/invalid-config", caught.value.message


@FEW
@given(
    text=st.sampled_from(["nan", "inf", "-inf", "1e308", "1e999", "-1", "315576001", "1e12", "x"])
    | BAD_SECONDS.filter(lambda v: isinstance(v, int | float) and not isinstance(v, bool)).map(repr)
)
def test_an_environment_duration_out_of_bounds_is_invalid_config(text: str, tmp_path: Path) -> None:
    env = {"BLAMEQUEUE_LOCAL_PATH": str(tmp_path / "env.db"), "BLAMEQUEUE_SWEEP_INTERVAL": text}
    with pytest.raises(QueueError) as caught:
        Queue.from_env(env)
    assert caught.value.code == "queue/invalid-config", caught.value.message


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1", None, math.inf, 2**0.5])
def test_max_payload_bytes_must_be_a_positive_int(value: Any, tmp_path: Path) -> None:
    with pytest.raises(QueueError) as caught:
        Queue(backends={"b": _store("memory", tmp_path, max_payload_bytes=value)})
    assert caught.value.code == "queue/invalid-config"
    assert "max_payload_bytes" in caught.value.message


def test_sqs_defaults_to_what_fits_one_message_and_refuses_more() -> None:
    from blamequeue_sqs import SqsBackend

    sqs = {"protocol": "sqs", "queue_url": "http://127.0.0.1:1/000000000000/q", "seal": SEAL}
    queue = Queue(backends={"s": sqs})
    ceiling = SqsBackend.max_payload_bytes
    assert ceiling == 184_320
    assert queue._runtimes["s"].max_payload_bytes == ceiling
    assert (
        Queue(backends={"s": {**sqs, "max_payload_bytes": 1000}})._runtimes["s"].max_payload_bytes
        == 1000
    )
    with pytest.raises(QueueError) as caught:
        Queue(backends={"s": {**sqs, "max_payload_bytes": ceiling + 1}})
    assert caught.value.code == "queue/invalid-config"


def test_the_largest_sqs_payload_fits_a_message_sealed() -> None:
    from blamequeue._codec import SealedCodec, payload_place
    from blamequeue._sealing import SecretBoxSealer
    from blamequeue.abc import NewJob
    from blamequeue_sqs import SqsBackend
    from blamequeue_sqs._messages import ATTR_JOB_ID, body_of, encode_body, entry_size

    limit = SqsBackend.max_payload_bytes
    assert limit is not None
    kid = "k" * 64  # the longest key id: the longest envelope head
    sealer = SecretBoxSealer({kid: bytes(range(32))})
    codec = SealedCodec(sealer)
    queue_name = "\U0001f600" * 200  # the longest queue name, escaped as 12 ASCII bytes each
    job_id = "job-01J0ZK5V3G9YB6R2W8X4T1QH7C"
    text = json.dumps("x" * (limit - 2))
    assert len(text.encode()) == limit
    meta = json.dumps({"task": "t" * 200, "timeout": MAX_SECONDS})
    payload = codec.seal_text(text, payload_place(queue_name, job_id, None, meta))
    job = NewJob(
        id=job_id,
        queue=queue_name,
        payload=payload,
        priority=0,
        max_attempts=2**31 - 1,
        created_at=1.7e9,
        available_at=1.7e9 + MAX_SECONDS,
        classification="c" * 200,
        trace_id="t" * 200,
        meta=meta,
    )
    entry = {
        "MessageBody": encode_body(body_of(job)),
        "MessageAttributes": {ATTR_JOB_ID: {"DataType": "String", "StringValue": job_id}},
    }
    assert entry_size(entry) <= 262_144


# -- payloads -------------------------------------------------------------------------------------
def _entries(q: Queue, payload: Any) -> dict[str, Callable[[], Any]]:
    """Every public path a payload takes into the store, each with ``payload`` among good ones."""
    return {
        "enqueue": lambda: q.enqueue(Q, payload),
        "enqueue_many": lambda: q.enqueue_many(Q, [{"ok": 1}, payload, {"ok": 2}]),
        "flow": lambda: q.enqueue_flow(
            Q,
            [
                FlowChild(name="a", payload={"ok": 1}),
                FlowChild(name="b", payload=payload, depends_on=["a"]),
            ],
        ),
        "task": lambda: q.job("t", payload).dispatch(),
        "batch": lambda: q.batch([("t", {"ok": 1}), ("t", payload)]).dispatch(),
        "batch callback": lambda: q.batch([("t", {"ok": 1})]).then("t", payload).dispatch(),
        "schedule": lambda: q.schedule("@hourly", "t", payload, name=f"s-{uuid.uuid4().hex}"),
    }


ENTRIES = sorted(_entries(None, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", ENTRIES)
@FEW
@given(payload=payloads_that_lose_keys())
async def test_a_payload_json_would_change_is_a_bad_payload_and_stores_nothing(
    queue: Queue, entry: str, payload: Any
) -> None:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    # The size is checked first (it is cheap, the walk over the keys is not).
    code = "queue/payload-too-large" if len(text.encode()) > SMALL else "queue/bad-payload"
    await refused(_entries(queue, payload)[entry], code)
    await nothing_stored(queue)


@pytest.mark.parametrize("entry", ENTRIES)
@FEW
@given(size=st.integers(0, 3 * SMALL), wide=st.booleans())
async def test_a_payload_over_max_payload_bytes_is_refused_and_stores_nothing(
    queue: Queue, entry: str, size: int, wide: bool
) -> None:
    payload = {"s": ("é" if wide else "x") * size}  # é: two bytes in UTF-8, one character
    encoded = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())
    if encoded <= SMALL:
        return  # fits: the other tests store such payloads
    await refused(_entries(queue, payload)[entry], "queue/payload-too-large")
    await nothing_stored(queue)


async def test_a_payload_of_exactly_max_payload_bytes_is_stored(queue: Queue) -> None:
    payload = "x" * (SMALL - 2)  # its JSON: SMALL bytes with the quotes
    job_id = await queue.enqueue(Q, payload)
    [job] = [info.job for info in (await queue.list_jobs(Q)).jobs]
    assert (job.id, job.payload) == (job_id, payload)


async def test_the_default_limit_is_one_mebibyte(store_kind: str, tmp_path: Path) -> None:
    async with Queue(backends={"b": _store(store_kind, tmp_path)}, sweep_interval=0) as q:
        await refused(q.enqueue(Q, "x" * (1_048_576 - 1)), "queue/payload-too-large")
        assert await q.size(Q) == 0
        await q.enqueue(Q, "x" * (1_048_576 - 2))
        assert await q.size(Q) == 1


async def test_a_result_over_max_payload_bytes_completes_the_job_and_result_raises(
    queue: Queue,
) -> None:
    async def handler(job: Job, ctx: JobContext) -> str:
        return "x" * SMALL

    job_id = await queue.enqueue(Q, {})
    assert (await queue.tick(Q, handler)).succeeded == 1
    info = await queue.job_info(job_id)
    assert info is not None
    assert info.state == "done"
    error = await refused(queue.result(job_id), "queue/payload-too-large")
    assert "completed" in error.message


# -- readers -----------------------------------------------------------------------------------
async def _store_far_future_job(q: Queue) -> str:
    """A job whose stored times no check lets through any more (written by an older version,
    or by hand): it must still read back everywhere."""
    runtime = q._runtime(None)
    [draft] = q._build_jobs(
        runtime,
        Q,
        [{"n": 1}],
        priority=0,
        delay=0,
        max_attempts=None,
        classification=None,
        trace_id=None,
        backoff=None,
    )
    far = attrs.evolve(draft, available_at=1e15, created_at=-1e15)
    await runtime.backend.enqueue([far])
    return far.id


async def test_a_stored_time_beyond_a_datetime_reads_back_everywhere(queue: Queue) -> None:
    job_id = await _store_far_future_job(queue)
    [info] = (await queue.list_jobs(Q)).jobs
    assert info.job.available_at.year == 9999
    assert info.job.created_at.year == 1
    found = await queue.job_info(job_id)
    assert found is not None
    assert found.job.id == job_id
    assert (await queue.get_job(job_id)) is not None
    app = dashboard_app(queue, token="bounds-dashboard-token-0123")
    headers = {"Authorization": "Bearer bounds-dashboard-token-0123"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        listed = await client.get(f"/api/queues/{Q}/jobs", headers=headers)
        assert listed.status_code == 200, listed.text
        shown = await client.get(f"/api/jobs/{job_id}", headers=headers)
        assert shown.status_code == 200, shown.text


# -- the dashboard's actions ---------------------------------------------------------------------
HOSTILE_BODIES = st.sampled_from(
    [b"NaN", b"Infinity", b"-Infinity", b"1e308", b"1e999", b"[]", b'{"queue": NaN}']
) | st.builds(
    lambda v: json.dumps({"queue": v}).encode(),
    st.floats() | st.integers() | st.booleans() | st.none() | st.text(max_size=5),
)


@FEW
@given(body=HOSTILE_BODIES, action=st.sampled_from(["retry-all", "purge"]))
async def test_a_hostile_dashboard_action_is_a_4xx_and_changes_nothing(
    queue: Queue, body: bytes, action: str
) -> None:
    async def fail(job: Job, ctx: JobContext) -> None:
        raise RuntimeError("dead")

    if await queue.dlq_size(Q) == 0:
        await queue.enqueue(Q, {}, max_attempts=1)
        await queue.tick(Q, fail)
    assert await queue.dlq_size(Q) == 1
    app = dashboard_app(queue, token="bounds-dashboard-token-0123")
    headers = {
        "Authorization": "Bearer bounds-dashboard-token-0123",
        "X-Blamequeue-Action": "1",
        "Content-Type": "application/json",
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        answer = await client.post(f"/api/queues/{Q}/dlq/{action}", content=body, headers=headers)
    assert 400 <= answer.status_code < 500, answer.text
    assert await queue.dlq_size(Q) == 1


# -- the CLI -------------------------------------------------------------------------------------
CLI_CASES = [
    ("--delay", "1e12"),
    ("--delay", "inf"),
    ("--delay", "nan"),
    ("--delay", "-1"),
    ("--delay", str(int(MAX_SECONDS) + 1)),
    ("--timeout", "1e308"),
    ("--unique-for", "315576001"),
]


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        input=stdin,
        env=environment(),
        timeout=60,
        check=False,
    )


def test_the_cli_refuses_durations_out_of_bounds_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    for option, value in CLI_CASES:
        extra = ["--unique-key", "k"] if option == "--unique-for" else []
        result = _cli("enqueue", Q, "{}", option, value, *extra, "--path", str(db))
        assert result.returncode == 2, (option, value, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert option in result.stderr or "10 years" in result.stderr, result.stderr
    assert sizes(db, Q) == (0, 0)


def test_the_cli_refuses_an_oversize_payload_with_its_code(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    payload = json.dumps({"s": "x" * 1_048_576})
    result = _cli("enqueue", Q, "-", "--path", str(db), stdin=payload)
    assert result.returncode != 0
    assert "queue/payload-too-large" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '[{"x": {"k": 1, "k": 1}}]'])
def test_the_cli_refuses_a_payload_whose_keys_repeat(tmp_path: Path, text: str) -> None:
    db = tmp_path / "cli.db"
    result = _cli("enqueue", Q, text, "--path", str(db))
    assert result.returncode == 2
    assert "queue/bad-payload" in result.stderr
    assert sizes(db, Q) == (0, 0)


# -- counts --------------------------------------------------------------------------------------
HUGE_COUNTS = st.sampled_from([2**31, 2**63, 10**30, 10**400]) | st.integers(min_value=2**31)
COUNTS: dict[str, Callable[[Queue, Any], Any]] = {
    "tick max": lambda q, v: q.tick(Q, _noop, max=v),
    "tick concurrency": lambda q, v: q.tick(Q, _noop, concurrency=v),
    "consume concurrency": lambda q, v: q.consume(Q, _noop, concurrency=v),
    "rate limit max": lambda q, v: q.consume(Q, _noop, rate_limit=RateLimit(max=v, per_seconds=1)),
    "global rate limit max": lambda q, v: q.tick(
        Q, _noop, global_rate_limit={"max": v, "per_seconds": 1}
    ),
    "group_concurrency": lambda q, v: q.tick(Q, _noop, group_concurrency=v),
    "max_attempts": lambda q, v: q.enqueue(Q, {}, max_attempts=v),
}


@pytest.mark.parametrize("entry", sorted(COUNTS))
@FEW
@given(value=HUGE_COUNTS)
async def test_a_count_no_store_can_hold_is_a_bad_argument(
    queue: Queue, entry: str, value: int
) -> None:
    await queue.enqueue(Q, {})  # a job for a tick to lease, were the count let through
    try:
        await refused(lambda: COUNTS[entry](queue, value), "queue/bad-argument")
    finally:
        await queue.purge(Q)


@FEW
@given(value=BAD_SECONDS)
def test_a_health_threshold_duration_out_of_bounds_is_a_bad_argument(value: Any) -> None:
    from blamequeue import HealthThresholds

    with pytest.raises(QueueError) as caught:
        HealthThresholds(max_oldest_age=value)
    assert caught.value.code == "queue/bad-argument"


def test_the_cli_reads_back_a_stored_time_beyond_a_datetime(tmp_path: Path) -> None:
    import anyio

    db = tmp_path / "cli.db"

    async def store() -> str:
        async with Queue(backends={"default": {"protocol": "local", "path": str(db)}}) as q:
            return await _store_far_future_job(q)

    job_id = anyio.run(store)
    for args in (("jobs", Q), ("job", job_id), ("queues",)):
        for output in ((), ("--json",)):
            result = _cli(*args, *output, "--path", str(db))
            assert result.returncode == 0, (args, result.stderr)
            assert "Traceback" not in result.stderr


# -- the key check itself --------------------------------------------------------------------------
ANY_KEYS = st.text(max_size=4) | NON_STR_KEYS | st.sampled_from(["1", "-2", "1.5", "true", "null"])
NESTED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(ANY_KEYS.filter(lambda k: k == k), inner, max_size=4)
    ),
    max_leaves=20,
)


def _non_str_key_in(value: Any) -> bool:
    if isinstance(value, dict):
        return any(not isinstance(k, str) or _non_str_key_in(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_non_str_key_in(item) for item in value)
    return False


@settings(FEW, max_examples=400)
@given(value=NESTED)
def test_dumps_refuses_exactly_the_payloads_with_a_non_str_key(value: Any) -> None:
    from blamequeue._codec import dumps

    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return  # a float key JSON cannot write: refused for that reason
    if _non_str_key_in(value):
        with pytest.raises(QueueError) as caught:
            dumps(value)
        assert caught.value.code == "queue/bad-payload"
    else:
        assert json.loads(dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    ("data", "code"),
    [("x" * SMALL, "queue/payload-too-large"), ({1: "a", "1": "b"}, "queue/bad-payload")],
)
async def test_progress_data_is_held_to_the_payload_rules(
    queue: Queue, data: Any, code: str
) -> None:
    seen: list[str] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        try:
            await ctx.progress(50, data)
        except QueueError as exc:
            seen.append(exc.code)

    await queue.enqueue(Q, {})
    assert (await queue.tick(Q, handler)).succeeded == 1
    assert seen == [code]
