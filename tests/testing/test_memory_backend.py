"""MemoryBackend driven directly through the backend contract, with explicit ``now`` values."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Literal

import anyio
import pytest

from blamequeue.abc import Backend, BackendContext, NewJob, Settlement, StoredJob
from blamequeue.errors import BadArgumentError, ConfigError
from blamequeue_testing import MemoryBackend, VirtualClock
from blamequeue_testing import _plugin as memory_plugin

pytestmark = pytest.mark.anyio

T0 = 1_000.0
EXPIRED = "lease expired"
Outcome = Literal["done", "retry", "dead", "release"]


def make_backend(
    name: str = "mem", clock: VirtualClock | None = None, **options: Any
) -> MemoryBackend:
    context = BackendContext(name=name, clock=clock or VirtualClock(start=T0))
    return MemoryBackend(options, context)


_ids = iter(range(1, 10**9))


def job(
    queue: str = "q",
    *,
    priority: int = 0,
    available_at: float = T0,
    max_attempts: int = 5,
    parked: bool = False,
    id: str | None = None,
) -> NewJob:
    return NewJob(
        id=id or f"job-{next(_ids):06d}",
        queue=queue,
        payload='{"n": 1}',
        priority=priority,
        max_attempts=max_attempts,
        created_at=T0,
        available_at=available_at,
        classification="internal",
        trace_id="trace-1",
        meta="meta",
        parked=parked,
    )


async def lease_ids(
    backend: Backend, queue: str = "q", *, limit: int = 100, now: float = T0
) -> list[str]:
    return [
        lease.job.id for lease in await backend.lease(queue, limit=limit, now=now, lease_seconds=30)
    ]


async def state_of(backend: MemoryBackend, job_id: str) -> StoredJob:
    stored = await backend.get_job(job_id)
    assert stored is not None
    return stored


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"test-ns-{random.random()}"
    yield name
    MemoryBackend.forget_namespace(name)


# -- construction -------------------------------------------------------------------------------
def test_protocol_and_capabilities() -> None:
    backend = make_backend()
    assert backend.protocol == "memory"
    assert backend.capabilities.dlq is True
    assert backend.capabilities.flows is True
    assert backend.capabilities.cross_process_wakeup is False
    assert backend.capabilities.async_libraries == frozenset({"asyncio", "trio"})
    assert backend.store_path is None


def test_plugin_registers_the_memory_protocol() -> None:
    registered: dict[str, type] = {}
    memory_plugin.blamequeue_register_protocols(register=registered.__setitem__)
    assert registered == {"memory": MemoryBackend}


def test_unknown_option_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        make_backend(path="x.db")
    assert info.value.code == "queue/invalid-config"
    assert "'path'" in info.value.message


@pytest.mark.parametrize("bad", ["", 3, ["a"]])
def test_namespace_must_be_a_non_empty_string(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        make_backend(namespace=bad)
    assert "namespace" in info.value.message


# -- enqueue and order ----------------------------------------------------------------------
async def test_enqueue_stores_pending_jobs_verbatim() -> None:
    backend = make_backend()
    new = job()
    await backend.enqueue([new])
    stored = await state_of(backend, new.id)
    assert stored.state == "pending"
    assert stored.attempts == 0
    assert (stored.payload, stored.classification, stored.trace_id, stored.meta) == (
        new.payload,
        "internal",
        "trace-1",
        "meta",
    )
    assert await backend.size("q") == 1


async def test_enqueue_is_all_or_nothing_on_a_duplicate_id() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="job-a")])
    with pytest.raises(BadArgumentError):
        await backend.enqueue([job(id="job-b"), job(id="job-a")])
    assert await backend.get_job("job-b") is None
    with pytest.raises(BadArgumentError):
        await backend.enqueue([job(id="job-c"), job(id="job-c")])
    assert await backend.size("q") == 1


async def test_lease_order_is_priority_then_available_at_then_enqueue_order() -> None:
    backend = make_backend()
    jobs = [
        job(id="low-early", priority=0, available_at=T0 - 10),
        job(id="high-late", priority=5, available_at=T0 - 1),
        job(id="low-late-1", priority=0, available_at=T0 - 1),
        job(id="high-early", priority=5, available_at=T0 - 5),
        job(id="low-late-2", priority=0, available_at=T0 - 1),
        job(id="negative", priority=-3, available_at=T0 - 100),
    ]
    await backend.enqueue(jobs[:3])
    await backend.enqueue(jobs[3:])
    assert await lease_ids(backend) == [
        "high-early",
        "high-late",
        "low-early",
        "low-late-1",
        "low-late-2",
        "negative",
    ]


async def test_lease_takes_at_most_limit_jobs() -> None:
    backend = make_backend()
    await backend.enqueue([job(id=f"j{n}") for n in range(5)])
    assert await lease_ids(backend, limit=2) == ["j0", "j1"]
    assert await lease_ids(backend, limit=0) == []
    assert await lease_ids(backend, limit=10) == ["j2", "j3", "j4"]
    assert await lease_ids(backend) == []


async def test_lease_of_an_unknown_queue_is_empty() -> None:
    assert await lease_ids(make_backend(), "nothing-here") == []


async def test_queues_are_separate() -> None:
    backend = make_backend()
    await backend.enqueue([job("a", id="in-a"), job("b", id="in-b")])
    assert await lease_ids(backend, "a") == ["in-a"]
    assert await backend.size("b") == 1


async def test_delayed_job_is_leased_only_once_due() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="later", available_at=T0 + 60), job(id="now")])
    assert await lease_ids(backend, now=T0) == ["now"]
    assert await lease_ids(backend, now=T0 + 59.999) == []
    assert await lease_ids(backend, now=T0 + 60) == ["later"]


async def test_a_delayed_job_becoming_due_takes_its_place_by_priority() -> None:
    backend = make_backend()
    await backend.enqueue(
        [job(id="waiting", available_at=T0), job(id="urgent", priority=9, available_at=T0 + 5)]
    )
    assert await lease_ids(backend, limit=1, now=T0 + 5) == ["urgent"]


async def test_lease_with_an_earlier_now_does_not_take_jobs_due_later() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="first")])
    assert await lease_ids(backend, now=T0 + 10) == ["first"]
    await backend.enqueue([job(id="at-7", available_at=T0 + 7)])
    assert await lease_ids(backend, now=T0) == []  # a worker whose clock is behind
    assert await lease_ids(backend, now=T0 + 6.9) == []
    assert await lease_ids(backend, now=T0 + 7) == ["at-7"]


async def test_lease_marks_jobs_inflight_with_a_bumped_attempt_and_expiry() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    [lease] = await backend.lease("q", limit=1, now=T0 + 1, lease_seconds=30)
    assert lease.expires_at == T0 + 31
    assert lease.job.state == "inflight"
    assert lease.job.attempts == 1
    assert lease.token
    assert (await state_of(backend, "j")).state == "inflight"
    assert await backend.size("q") == 1


async def test_concurrent_leases_never_return_the_same_job() -> None:
    backend = make_backend()
    await backend.enqueue([job(id=f"j{n}") for n in range(200)])
    taken: list[str] = []

    async def worker() -> None:
        while ids := await lease_ids(backend, limit=7):
            taken.extend(ids)

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(worker)
    assert sorted(taken) == sorted(f"j{n}" for n in range(200))


# -- settlement -----------------------------------------------------------------------------
async def lease_one(
    backend: Backend, now: float = T0, lease_seconds: float = 30
) -> tuple[str, str]:
    [lease] = await backend.lease("q", limit=1, now=now, lease_seconds=lease_seconds)
    return lease.job.id, lease.token


async def test_settle_done_keeps_the_job_as_done() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    assert await backend.settle(
        [Settlement(job_id=job_id, token=token, outcome="done", at=T0 + 2)], now=T0 + 2
    ) == [True]
    stored = await state_of(backend, "j")
    assert (stored.state, stored.finished_at, stored.attempts) == ("done", T0 + 2, 1)
    assert await backend.size("q") == 0


async def test_settle_done_without_keep_deletes_at_once() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    settlement = Settlement(job_id=job_id, token=token, outcome="done", at=T0, keep=False)
    assert await backend.settle([settlement], now=T0) == [True]
    assert await backend.get_job("j") is None


async def test_settle_retry_pends_the_job_until_its_backoff_passes() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    retry = Settlement(job_id=job_id, token=token, outcome="retry", at=T0 + 4, error="boom")
    assert await backend.settle([retry], now=T0) == [True]
    stored = await state_of(backend, "j")
    assert (stored.state, stored.available_at, stored.last_error, stored.attempts) == (
        "pending",
        T0 + 4,
        "boom",
        1,
    )
    assert await lease_ids(backend, now=T0 + 3) == []
    [lease] = await backend.lease("q", limit=1, now=T0 + 4, lease_seconds=30)
    assert lease.job.attempts == 2
    assert lease.job.last_error == "boom"


async def test_settle_dead_moves_the_job_to_the_dlq() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    dead = Settlement(job_id=job_id, token=token, outcome="dead", at=T0 + 1, error="fatal")
    assert await backend.settle([dead], now=T0 + 1) == [True]
    stored = await state_of(backend, "j")
    assert (stored.state, stored.finished_at, stored.last_error) == ("dead", T0 + 1, "fatal")
    assert await backend.size("q") == 0
    assert await backend.dlq_size("q") == 1


async def test_settle_release_gives_the_attempt_back() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    release = Settlement(job_id=job_id, token=token, outcome="release", at=T0)
    assert await backend.settle([release], now=T0) == [True]
    stored = await state_of(backend, "j")
    assert (stored.state, stored.attempts, stored.available_at) == ("pending", 0, T0)
    assert await lease_ids(backend) == ["j"]


async def test_settlement_is_applied_once() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    done = Settlement(job_id=job_id, token=token, outcome="done", at=T0)
    assert await backend.settle([done, done], now=T0) == [True, False]


async def test_settle_with_a_token_that_lost_the_job_is_refused_and_changes_nothing() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, old_token = await lease_one(backend, lease_seconds=10)
    await backend.sweep(now=T0 + 10, retain_done=3600, expired_error=EXPIRED)
    _, new_token = await lease_one(backend, now=T0 + 10)
    assert new_token != old_token
    stale = Settlement(job_id=job_id, token=old_token, outcome="dead", at=T0 + 11, error="late")
    assert await backend.settle([stale], now=T0 + 11) == [False]
    stored = await state_of(backend, "j")
    assert (stored.state, stored.attempts, stored.last_error) == ("inflight", 2, None)
    fresh = Settlement(job_id=job_id, token=new_token, outcome="done", at=T0 + 12)
    assert await backend.settle([fresh], now=T0 + 12) == [True]


async def test_settle_of_an_unknown_job_is_refused() -> None:
    backend = make_backend()
    settlement = Settlement(job_id="job-nope", token="t", outcome="done", at=T0)
    assert await backend.settle([settlement], now=T0) == [False]


async def test_settle_reports_each_item_of_a_batch() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="a"), job(id="b")])
    leases = await backend.lease("q", limit=2, now=T0, lease_seconds=30)
    batch = [
        Settlement(job_id="a", token=leases[0].token, outcome="done", at=T0),
        Settlement(job_id="b", token="wrong", outcome="done", at=T0),
        Settlement(job_id="b", token=leases[1].token, outcome="retry", at=T0, error="e"),
    ]
    assert await backend.settle(batch, now=T0) == [True, False, True]


# -- extend ---------------------------------------------------------------------------------
async def test_extend_moves_the_expiry_of_a_held_lease() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend, lease_seconds=10)
    assert await backend.extend(
        [(job_id, token), (job_id, "wrong"), ("job-nope", token)], expires_at=T0 + 100
    ) == [
        True,
        False,
        False,
    ]
    result = await backend.sweep(now=T0 + 50, retain_done=3600, expired_error=EXPIRED)
    assert result.repended == 0
    assert (await state_of(backend, "j")).state == "inflight"
    result = await backend.sweep(now=T0 + 100, retain_done=3600, expired_error=EXPIRED)
    assert result.repended == 1


# -- sweep ----------------------------------------------------------------------------------
async def test_sweep_repends_expired_leases_due_at_once() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="expired"), job(id="alive")])
    [first] = await backend.lease("q", limit=1, now=T0, lease_seconds=10)
    [second] = await backend.lease("q", limit=1, now=T0 + 5, lease_seconds=10)
    assert (first.job.id, second.job.id) == ("expired", "alive")
    result = await backend.sweep(now=T0 + 10, retain_done=3600, expired_error=EXPIRED)
    assert (result.repended, list(result.dead), result.pruned) == (1, [], 0)
    stored = await state_of(backend, "expired")
    assert (stored.state, stored.available_at, stored.attempts) == ("pending", T0 + 10, 1)
    assert (await state_of(backend, "alive")).state == "inflight"
    assert await lease_ids(backend, now=T0 + 10) == ["expired"]


async def test_sweep_dead_letters_an_expired_lease_with_no_attempts_left() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j", max_attempts=1)])
    await lease_one(backend, lease_seconds=10)
    result = await backend.sweep(now=T0 + 11, retain_done=3600, expired_error=EXPIRED)
    assert result.repended == 0
    [dead] = result.dead
    assert (dead.id, dead.state, dead.last_error, dead.finished_at) == (
        "j",
        "dead",
        EXPIRED,
        T0 + 11,
    )
    assert await backend.dlq_size("q") == 1


async def test_sweep_prunes_done_jobs_past_their_retention() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="old"), job(id="young")])
    for job_id, at in (("old", T0), ("young", T0 + 50)):
        [lease] = await backend.lease("q", limit=1, now=at, lease_seconds=30)
        assert lease.job.id == job_id
        await backend.settle(
            [Settlement(job_id=job_id, token=lease.token, outcome="done", at=at)], now=at
        )
    result = await backend.sweep(now=T0 + 100, retain_done=100, expired_error=EXPIRED)
    assert result.pruned == 0  # finished exactly at now - retain_done: kept
    result = await backend.sweep(now=T0 + 100.5, retain_done=100, expired_error=EXPIRED)
    assert result.pruned == 1
    assert await backend.get_job("old") is None
    assert (await state_of(backend, "young")).state == "done"


async def test_sweep_never_prunes_dead_jobs() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    job_id, token = await lease_one(backend)
    await backend.settle(
        [Settlement(job_id=job_id, token=token, outcome="dead", at=T0, error="x")], now=T0
    )
    result = await backend.sweep(now=T0 + 10**6, retain_done=0, expired_error=EXPIRED)
    assert result.pruned == 0
    assert await backend.dlq_size("q") == 1


# -- size, parked, purge -------------------------------------------------------------------
async def test_size_counts_pending_delayed_inflight_and_parked() -> None:
    backend = make_backend()
    await backend.enqueue(
        [
            job(id="pending"),
            job(id="delayed", available_at=T0 + 99),
            job(id="parked", parked=True),
            job(id="lease-me", priority=1),
        ]
    )
    assert await lease_ids(backend, limit=1) == ["lease-me"]
    assert await backend.size("q") == 4
    assert await backend.size("other") == 0


async def test_parked_jobs_are_never_leased() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="parked", parked=True)])
    assert (await state_of(backend, "parked")).state == "parked"
    assert await lease_ids(backend, now=T0 + 10**6) == []


async def test_purge_deletes_live_and_done_jobs_and_leaves_dead_ones() -> None:
    backend = make_backend()
    await backend.enqueue([job(id=n) for n in ("done", "dead", "inflight", "pending")])
    await backend.enqueue([job(id="parked", parked=True), job(id="delayed", available_at=T0 + 60)])
    await backend.enqueue([job("other", id="elsewhere")])
    leases = {
        lease.job.id: lease for lease in await backend.lease("q", limit=3, now=T0, lease_seconds=30)
    }
    await backend.settle(
        [
            Settlement(job_id="done", token=leases["done"].token, outcome="done", at=T0),
            Settlement(job_id="dead", token=leases["dead"].token, outcome="dead", at=T0, error="x"),
        ],
        now=T0,
    )
    assert await backend.purge("q") == 4  # inflight, pending, parked, delayed
    assert await backend.size("q") == 0
    assert await backend.get_job("done") is None
    assert await backend.dlq_size("q") == 1
    assert await backend.size("other") == 1
    late = Settlement(job_id="inflight", token=leases["inflight"].token, outcome="done", at=T0)
    assert await backend.settle([late], now=T0) == [False]
    assert await lease_ids(backend, now=T0 + 100) == []


async def test_purge_of_an_unknown_queue_is_zero() -> None:
    assert await make_backend().purge("nothing") == 0


# -- dead-letter queue ----------------------------------------------------------------------
async def kill(backend: Backend, job_id: str, at: float, error: str = "fatal") -> None:
    [lease] = await backend.lease("q", limit=1, now=at, lease_seconds=30)
    assert lease.job.id == job_id
    await backend.settle(
        [Settlement(job_id=job_id, token=lease.token, outcome="dead", at=at, error=error)], now=at
    )


async def test_dlq_list_is_newest_first_and_honours_limit() -> None:
    backend = make_backend()
    await backend.enqueue([job(id=n) for n in ("first", "second", "third")])
    await kill(backend, "first", T0)
    await kill(backend, "second", T0 + 1)
    await kill(backend, "third", T0 + 1)  # same instant: the later failure comes first
    assert [d.id for d in await backend.dlq_list("q", limit=None)] == ["third", "second", "first"]
    assert [d.id for d in await backend.dlq_list("q", limit=2)] == ["third", "second"]
    assert await backend.dlq_list("other", limit=None) == []
    [newest, *_] = await backend.dlq_list("q", limit=1)
    assert (newest.state, newest.last_error, newest.attempts) == ("dead", "fatal", 1)


async def test_dlq_retry_returns_the_job_as_it_was_and_pends_it_with_attempts_reset() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="j")])
    await kill(backend, "j", T0)
    before = await backend.dlq_retry("j", now=T0 + 30)
    assert before is not None
    assert (before.state, before.attempts, before.finished_at, before.last_error) == (
        "dead",
        1,
        T0,
        "fatal",
    )
    stored = await state_of(backend, "j")
    assert (stored.state, stored.attempts, stored.available_at) == ("pending", 0, T0 + 30)
    assert await backend.dlq_size("q") == 0
    assert await lease_ids(backend, now=T0 + 29) == []
    [lease] = await backend.lease("q", limit=1, now=T0 + 30, lease_seconds=30)
    assert lease.job.attempts == 1


async def test_dlq_retry_of_a_job_that_is_not_dead_is_none() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="pending")])
    assert await backend.dlq_retry("pending", now=T0) is None
    assert await backend.dlq_retry("job-nope", now=T0) is None
    assert (await state_of(backend, "pending")).state == "pending"


async def test_dlq_purge_deletes_only_dead_jobs_of_the_queue() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="a"), job(id="b"), job(id="alive")])
    await kill(backend, "a", T0)
    await kill(backend, "b", T0)
    assert await backend.dlq_purge("q") == 2
    assert await backend.dlq_size("q") == 0
    assert await backend.size("q") == 1
    assert await backend.dlq_purge("q") == 0
    assert await backend.dlq_purge("never-seen") == 0


# -- namespaces -----------------------------------------------------------------------------
async def test_backends_with_the_same_namespace_share_jobs(namespace: str) -> None:
    producer = make_backend("a", namespace=namespace)
    worker = make_backend("b", namespace=namespace)
    await producer.enqueue([job(id="shared")])
    assert await worker.size("q") == 1
    job_id, token = await lease_one(worker)
    assert await producer.settle(
        [Settlement(job_id=job_id, token=token, outcome="done", at=T0)], now=T0
    ) == [True]
    assert (await state_of(producer, "shared")).state == "done"


async def test_backends_without_a_namespace_are_private(namespace: str) -> None:
    first, second = make_backend(), make_backend()
    shared = make_backend(namespace=namespace)
    await first.enqueue([job(id="mine")])
    assert await second.size("q") == 0
    assert await shared.size("q") == 0


async def test_forget_namespace_starts_over(namespace: str) -> None:
    await make_backend(namespace=namespace).enqueue([job(id="j")])
    MemoryBackend.forget_namespace(namespace)
    assert await make_backend(namespace=namespace).size("q") == 0


# -- waiting --------------------------------------------------------------------------------
async def test_wait_for_work_times_out_on_the_queues_clock() -> None:
    clock = VirtualClock(start=T0)
    backend = make_backend(clock=clock)
    done = anyio.Event()

    async def wait() -> None:
        await backend.wait_for_work("q", timeout=5)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        clock.advance(5)
        await done.wait()


async def test_wait_for_work_returns_when_a_sharing_backend_enqueues(namespace: str) -> None:
    waiter = make_backend("w", namespace=namespace)
    producer = make_backend("p", namespace=namespace)
    done = anyio.Event()

    async def wait() -> None:
        await waiter.wait_for_work("q", timeout=3600)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        await producer.enqueue([job("other")])
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        await producer.enqueue([job("q")])
        await done.wait()


# -- against a reference model --------------------------------------------------------------
async def test_random_operations_match_a_naive_reference() -> None:
    """Leasing through heaps with lazy deletion gives exactly what a full scan would."""
    rng = random.Random(20240601)
    backend = make_backend()
    model: dict[str, dict[str, Any]] = {}  # id -> state, priority, available_at, seq
    tokens: dict[str, str] = {}
    seq = 0
    now = T0
    for step in range(1500):
        now += rng.choice([0, 0, 0.5, 1, 3])
        action = rng.random()
        if action < 0.25:
            batch = []
            for _ in range(rng.randint(1, 3)):
                seq += 1
                new = job(
                    priority=rng.randint(-2, 2), available_at=now + rng.choice([0, 0, 2, 5, -1])
                )
                batch.append(new)
                model[new.id] = {
                    "state": "pending",
                    "priority": new.priority,
                    "at": new.available_at,
                    "seq": seq,
                }
            await backend.enqueue(batch)
        elif action < 0.6:
            limit = rng.randint(1, 5)
            due = sorted(
                (m["priority"] * -1, m["at"], m["seq"], job_id)
                for job_id, m in model.items()
                if m["state"] == "pending" and m["at"] <= now
            )
            expected = [entry[3] for entry in due[:limit]]
            leases = await backend.lease("q", limit=limit, now=now, lease_seconds=4)
            assert [lease.job.id for lease in leases] == expected, f"step {step}"
            for lease in leases:
                model[lease.job.id]["state"] = "inflight"
                tokens[lease.job.id] = lease.token
        elif action < 0.9:
            inflight = [job_id for job_id, m in model.items() if m["state"] == "inflight"]
            if inflight:
                job_id = rng.choice(inflight)
                outcome: Outcome = rng.choice(["done", "retry", "release"])
                at = now + rng.choice([0, 1, 3])
                ok = await backend.settle(
                    [
                        Settlement(
                            job_id=job_id, token=tokens[job_id], outcome=outcome, at=at, keep=False
                        )
                    ],
                    now=now,
                )
                assert ok == [True], f"step {step}"  # only the sweep takes jobs away, and
                if outcome == "done":  # the model follows every sweep
                    del model[job_id]
                else:
                    model[job_id].update(state="pending", at=at)
        else:
            await backend.sweep(now=now, retain_done=0, expired_error=EXPIRED)
            for job_id, m in model.items():
                if m["state"] != "inflight":
                    continue
                stored = await backend.get_job(job_id)
                assert stored is not None
                if stored.state != "inflight":
                    m.update(state=stored.state, at=stored.available_at)
        assert await backend.size("q") == sum(
            1 for m in model.values() if m["state"] in ("pending", "inflight")
        )


# -- flows ----------------------------------------------------------------------------------------
def flow_job(id: str, *depends_on: str, flow_id: str = "flow-1") -> NewJob:
    return NewJob(
        id=id,
        queue="q",
        payload="null",
        priority=0,
        max_attempts=1,
        created_at=T0,
        available_at=T0,
        flow_id=flow_id,
        depends_on=depends_on,
        parked=bool(depends_on),
    )


async def complete(backend: MemoryBackend, *, at: float, keep: bool = True) -> list[str]:
    leases = await backend.lease("q", limit=100, now=at, lease_seconds=30)
    settlements = [
        Settlement(job_id=lease.job.id, token=lease.token, outcome="done", at=at, keep=keep)
        for lease in leases
    ]
    assert await backend.settle(settlements, now=at) == [True] * len(leases)
    return [lease.job.id for lease in leases]


async def test_parked_jobs_are_released_due_at_the_completion(namespace: str) -> None:
    backend = make_backend(namespace=namespace)
    await backend.enqueue([flow_job("a"), flow_job("b", "a"), flow_job("c", "a", "b")])
    assert await complete(backend, at=T0 + 3) == ["a"]
    b = await state_of(backend, "b")
    assert (b.state, b.available_at, b.depends_on) == ("pending", T0 + 3, ("a",))
    assert (await state_of(backend, "c")).state == "parked"
    assert await complete(backend, at=T0 + 4) == ["b"]
    assert await complete(backend, at=T0 + 4) == ["c"]


async def test_flow_indexes_empty_once_the_flow_is_gone() -> None:
    backend = make_backend()
    await backend.enqueue([flow_job("a"), flow_job("b", "a"), flow_job("c", "a", "b")])
    for _ in range(3):
        await complete(backend, at=T0, keep=False)
    assert await backend.flow_jobs("flow-1") == []
    assert backend._store.dependants == {}
    assert backend._store.flows == {}


async def test_purge_drops_the_flow_indexes() -> None:
    backend = make_backend()
    await backend.enqueue([flow_job("a"), flow_job("b", "a")])
    assert await backend.purge("q") == 2
    assert backend._store.dependants == {}
    assert backend._store.flows == {}


async def test_sweep_reports_the_jobs_it_repended() -> None:
    backend = make_backend()
    await backend.enqueue([job(id="x"), job(id="y", max_attempts=1)])
    await backend.lease("q", limit=10, now=T0, lease_seconds=30)
    result = await backend.sweep(now=T0 + 31, retain_done=3600, expired_error=EXPIRED)
    assert [(stored.id, stored.state) for stored in result.expired] == [("x", "pending")]
    assert [stored.id for stored in result.dead] == ["y"]
    assert result.repended == 1
