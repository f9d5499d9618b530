"""LocalBackend driven directly through the backend contract, with explicit ``now`` values."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from local_helpers import EXPIRED, T0, leased_ids, make_backend, new_job, row_of

from blamequeue.abc import NewJob, Settlement
from blamequeue.errors import BadArgumentError, QueueError
from blamequeue_local import LocalBackend
from blamequeue_local import _plugin as local_plugin

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


def done(job_id: str, token: str, *, at: float = T0, keep: bool = True) -> Settlement:
    return Settlement(job_id=job_id, token=token, outcome="done", at=at, keep=keep)


# -- registration and identity ----------------------------------------------------------------
def test_plugin_registers_protocol_local() -> None:
    registered: dict[str, type] = {}
    local_plugin.blamequeue_register_protocols(registered.__setitem__)
    assert registered == {"local": LocalBackend}


def test_capabilities_cover_dlq_wakeup_and_both_event_loops() -> None:
    caps = LocalBackend.capabilities
    assert LocalBackend.protocol == "local"
    assert caps.dlq
    assert caps.cross_process_wakeup
    assert caps.flows
    assert caps.async_libraries == frozenset({"asyncio", "trio"})


def test_store_path_is_the_configured_file(tmp_path: Path) -> None:
    assert make_backend(path=str(tmp_path / "a.db")).store_path == str(tmp_path / "a.db")
    assert make_backend().store_path == "./blamequeue.db"
    assert make_backend(path=":memory:").store_path is None


async def test_calls_before_open_say_the_backend_is_not_open(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    with pytest.raises(QueueError) as info:
        await backend.size("q")
    assert info.value.code == "queue/not-initialized"


async def test_open_is_idempotent_and_jobs_survive_reopening(tmp_path: Path) -> None:
    backend = make_backend(path=str(tmp_path / "jobs.db"))
    await backend.open()
    await backend.open()
    await backend.enqueue([new_job(id="job-keep")])
    await backend.close()
    await backend.close()
    await backend.open()
    try:
        assert await leased_ids(backend) == ["job-keep"]
    finally:
        await backend.close()


# -- enqueue and lease ------------------------------------------------------------------------
async def test_lease_marks_jobs_inflight_and_counts_the_attempt(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-a")])
    [lease] = await backend.lease("q", limit=5, now=T0, lease_seconds=30.0)
    assert lease.expires_at == T0 + 30.0
    assert lease.job.state == "inflight"
    assert lease.job.attempts == 1
    assert lease.token
    stored = await row_of(backend, "job-a")
    assert stored is not None
    assert stored.state == "inflight"
    assert stored.attempts == 1


async def test_job_fields_come_back_verbatim(backend: LocalBackend) -> None:
    payload = '{"text": "h\u00e9llo \u2603 \\u0000", "n": [1, 2.5]}'
    await backend.enqueue([new_job(id="job-v", payload=payload, priority=-3, max_attempts=7)])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    job = lease.job
    assert (job.id, job.queue, job.payload) == ("job-v", "q", payload)
    assert (job.priority, job.max_attempts, job.created_at, job.available_at) == (-3, 7, T0, T0)
    assert (job.classification, job.trace_id, job.meta) == ("internal", "trace-1", "meta")
    assert job.last_error is None
    assert job.finished_at is None
    assert isinstance(job.created_at, float)
    assert isinstance(job.available_at, float)


async def test_lease_order_is_priority_then_available_at_then_enqueue_order(
    backend: LocalBackend,
) -> None:
    await backend.enqueue(
        [
            new_job(id="low-early", priority=0, available_at=T0 - 10),
            new_job(id="high-late", priority=5, available_at=T0 - 1),
            new_job(id="high-early", priority=5, available_at=T0 - 5),
            new_job(id="high-late-2", priority=5, available_at=T0 - 1),
            new_job(id="low-early-2", priority=0, available_at=T0 - 10),
        ]
    )
    await backend.enqueue([new_job(id="mid", priority=1, available_at=T0)])
    assert await leased_ids(backend) == [
        "high-early",
        "high-late",
        "high-late-2",
        "mid",
        "low-early",
        "low-early-2",
    ]


async def test_order_holds_across_lease_batches(backend: LocalBackend) -> None:
    ids = [f"job-{n:03d}" for n in range(30)]
    await backend.enqueue([new_job(id=job_id) for job_id in ids])
    got: list[str] = []
    for _ in range(4):
        got += await leased_ids(backend, limit=8)
    assert got == ids


@pytest.mark.parametrize("count", [1, 3, 1500, 2048, 2049, 5000])
async def test_a_batch_of_any_size_is_stored_whole_and_in_order(
    backend: LocalBackend, count: int
) -> None:
    ids = [f"job-{count}-{n:05d}" for n in range(count)]
    await backend.enqueue([new_job(id=job_id) for job_id in ids])
    assert await backend.size("q") == count
    assert await leased_ids(backend, limit=count + 1) == ids


@pytest.mark.parametrize("count", [2, 2049])
async def test_both_enqueue_paths_store_every_field(backend: LocalBackend, count: int) -> None:
    # Up to 2048 jobs are bound as parameters, more travel as one JSON array: same rows.
    flow = NewJob(
        id=f"child-{count}",
        queue="q",
        payload='{"n": 2}',
        priority=3,
        max_attempts=4,
        created_at=T0,
        available_at=T0 + 5,
        classification="secret",
        trace_id="trace-2",
        meta="m",
        flow_id="flow-1",
        depends_on=("parent-a", "parent-b"),
        parked=True,
        group_key="tenant-7",
    )
    await backend.enqueue([*(new_job() for _ in range(count - 1)), flow])
    stored = await backend.get_job(flow.id)
    assert stored is not None
    assert (stored.state, stored.payload, stored.priority, stored.max_attempts) == (
        "parked",
        '{"n": 2}',
        3,
        4,
    )
    assert (stored.created_at, stored.available_at) == (T0, T0 + 5)
    assert (stored.classification, stored.trace_id, stored.meta) == ("secret", "trace-2", "m")
    assert (stored.flow_id, stored.depends_on, stored.group_key) == (
        "flow-1",
        ("parent-a", "parent-b"),
        "tenant-7",
    )
    assert (stored.attempts, stored.last_error, stored.finished_at) == (0, None, None)


async def test_a_huge_batch_with_nul_text_is_refused_whole(backend: LocalBackend) -> None:
    jobs = [new_job() for _ in range(2048)] + [new_job(payload="a\x00b")]
    with pytest.raises(BadArgumentError) as info:
        await backend.enqueue(jobs)
    assert "split the batch" in info.value.message
    assert await backend.size("q") == 0


async def test_delayed_job_is_not_leased_before_it_is_due(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="later", available_at=T0 + 60)])
    assert await leased_ids(backend, now=T0) == []
    assert await leased_ids(backend, now=T0 + 59.999) == []
    assert await leased_ids(backend, now=T0 + 60) == ["later"]


async def test_lease_takes_at_most_limit_jobs(backend: LocalBackend) -> None:
    await backend.enqueue([new_job() for _ in range(5)])
    assert len(await leased_ids(backend, limit=3)) == 3
    assert len(await leased_ids(backend, limit=3)) == 2
    assert await leased_ids(backend, limit=3) == []


async def test_lease_with_limit_zero_takes_nothing(backend: LocalBackend) -> None:
    await backend.enqueue([new_job()])
    assert await leased_ids(backend, limit=0) == []
    assert await backend.size("q") == 1


async def test_queues_are_separate(backend: LocalBackend) -> None:
    await backend.enqueue([new_job("a", id="in-a"), new_job("b", id="in-b")])
    assert await leased_ids(backend, "a") == ["in-a"]
    assert await leased_ids(backend, "b") == ["in-b"]


async def test_enqueue_is_all_or_nothing_on_a_duplicate_id(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="dup")])
    with pytest.raises(BadArgumentError) as info:
        await backend.enqueue([new_job(id="fresh"), new_job(id="dup")])
    assert info.value.code == "queue/bad-argument"
    assert await row_of(backend, "fresh") is None
    assert await backend.size("q") == 1


async def test_size_counts_pending_inflight_and_parked_only(backend: LocalBackend) -> None:
    await backend.enqueue(
        [new_job(id=f"j{n}") for n in range(4)] + [new_job(id="parked", parked=True)]
    )
    assert await backend.size("q") == 5
    leases = await backend.lease("q", limit=2, now=T0, lease_seconds=30.0)
    assert await backend.size("q") == 5
    await backend.settle(
        [
            done(leases[0].job.id, leases[0].token),
            Settlement(job_id=leases[1].job.id, token=leases[1].token, outcome="dead", at=T0),
        ],
        now=T0,
    )
    assert await backend.size("q") == 3
    assert (await row_of(backend, "parked")).state == "parked"  # type: ignore[union-attr]
    assert "parked" not in await leased_ids(backend)


# -- settle and the lease fence ---------------------------------------------------------------
async def test_done_with_keep_retains_the_job_as_done(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-d")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    assert await backend.settle([done("job-d", lease.token, at=T0 + 1)], now=T0 + 1) == [True]
    stored = await row_of(backend, "job-d")
    assert stored is not None
    assert stored.state == "done"
    assert stored.finished_at == T0 + 1


async def test_done_without_keep_deletes_the_job(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-d")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    assert await backend.settle([done("job-d", lease.token, keep=False)], now=T0) == [True]
    assert await row_of(backend, "job-d") is None


async def test_retry_puts_the_job_back_due_at_the_given_time(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-r")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    retry = Settlement(job_id="job-r", token=lease.token, outcome="retry", at=T0 + 2, error="boom")
    assert await backend.settle([retry], now=T0) == [True]
    stored = await row_of(backend, "job-r")
    assert stored is not None
    assert (stored.state, stored.available_at, stored.last_error) == ("pending", T0 + 2, "boom")
    assert await leased_ids(backend, now=T0 + 1) == []
    [again] = await backend.lease("q", limit=1, now=T0 + 2, lease_seconds=30.0)
    assert again.job.attempts == 2
    assert again.job.last_error == "boom"


async def test_dead_moves_the_job_to_the_dlq(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-x")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    dead = Settlement(job_id="job-x", token=lease.token, outcome="dead", at=T0 + 3, error="bad")
    assert await backend.settle([dead], now=T0 + 3) == [True]
    [letter] = await backend.dlq_list("q", limit=None)
    assert (letter.id, letter.state, letter.last_error) == ("job-x", "dead", "bad")
    assert letter.finished_at == T0 + 3
    assert letter.attempts == 1


async def test_release_gives_the_attempt_back(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-s")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    release = Settlement(job_id="job-s", token=lease.token, outcome="release", at=T0)
    assert await backend.settle([release], now=T0) == [True]
    stored = await row_of(backend, "job-s")
    assert stored is not None
    assert (stored.state, stored.attempts) == ("pending", 0)
    [again] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    assert again.job.attempts == 1


async def test_settle_with_a_foreign_token_is_refused(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-f")])
    await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    assert await backend.settle([done("job-f", "not-the-token")], now=T0) == [False]
    assert (await row_of(backend, "job-f")).state == "inflight"  # type: ignore[union-attr]


async def test_settlement_applies_once(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="job-o")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    twice = [done("job-o", lease.token), done("job-o", lease.token)]
    assert await backend.settle(twice, now=T0) == [True, False]
    assert await backend.settle([done("job-o", lease.token)], now=T0) == [False]


async def test_a_lost_lease_cannot_settle_after_the_job_is_leased_again(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([new_job(id="job-l")])
    [old] = await backend.lease("q", limit=1, now=T0, lease_seconds=10.0)
    await backend.sweep(now=T0 + 10, retain_done=3600.0, expired_error=EXPIRED)
    [new] = await backend.lease("q", limit=1, now=T0 + 10, lease_seconds=10.0)
    assert new.token != old.token
    assert await backend.settle([done("job-l", old.token)], now=T0 + 11) == [False]
    assert await backend.extend([("job-l", old.token)], expires_at=T0 + 99) == [False]
    assert await backend.settle([done("job-l", new.token)], now=T0 + 11) == [True]


async def test_a_mixed_batch_reports_each_settlement_in_order(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id=f"m{n}") for n in range(4)])
    leases = {
        lease.job.id: lease for lease in await backend.lease("q", limit=4, now=T0, lease_seconds=30)
    }
    batch = [
        done("m0", leases["m0"].token, keep=False),
        Settlement(job_id="m1", token="stale", outcome="retry", at=T0 + 5, error="e"),
        Settlement(job_id="m2", token=leases["m2"].token, outcome="retry", at=T0 + 5, error="e"),
        done("m3", "stale", keep=False),
        done("nope", leases["m0"].token),
        done("m3", leases["m3"].token),
    ]
    assert await backend.settle(batch, now=T0) == [True, False, True, False, False, True]
    assert await row_of(backend, "m0") is None
    assert (await row_of(backend, "m1")).state == "inflight"  # type: ignore[union-attr]
    assert (await row_of(backend, "m2")).state == "pending"  # type: ignore[union-attr]
    assert (await row_of(backend, "m3")).state == "done"  # type: ignore[union-attr]


async def test_an_empty_settle_or_extend_is_a_no_op(backend: LocalBackend) -> None:
    assert await backend.settle([], now=T0) == []
    assert await backend.extend([], expires_at=T0) == []


async def test_extend_moves_the_expiry_of_held_leases_only(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="e1"), new_job(id="e2")])
    l1, l2 = await backend.lease("q", limit=2, now=T0, lease_seconds=10.0)
    held = await backend.extend([(l1.job.id, l1.token), (l2.job.id, "stale")], expires_at=T0 + 100)
    assert held == [True, False]
    result = await backend.sweep(now=T0 + 50, retain_done=3600.0, expired_error=EXPIRED)
    assert result.repended == 1
    assert (await row_of(backend, l1.job.id)).state == "inflight"  # type: ignore[union-attr]
    assert (await row_of(backend, l2.job.id)).state == "pending"  # type: ignore[union-attr]


# -- sweep ------------------------------------------------------------------------------------
async def test_sweep_repends_expired_leases_due_now(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="s1"), new_job(id="s2")])
    await backend.lease("q", limit=1, now=T0, lease_seconds=10.0)
    await backend.lease("q", limit=1, now=T0 + 5, lease_seconds=10.0)
    result = await backend.sweep(now=T0 + 10, retain_done=3600.0, expired_error=EXPIRED)
    assert (result.repended, list(result.dead), result.pruned) == (1, [], 0)
    stored = await row_of(backend, "s1")
    assert stored is not None
    assert (stored.state, stored.available_at) == ("pending", T0 + 10)
    assert (await row_of(backend, "s2")).state == "inflight"  # type: ignore[union-attr]
    assert await leased_ids(backend, now=T0 + 10) == ["s1"]


async def test_sweep_sends_exhausted_expired_leases_to_the_dlq(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="once", max_attempts=1), new_job(id="twice", max_attempts=2)])
    await backend.lease("q", limit=2, now=T0, lease_seconds=10.0)
    result = await backend.sweep(now=T0 + 10, retain_done=3600.0, expired_error=EXPIRED)
    assert result.repended == 1
    [dead] = result.dead
    assert (dead.id, dead.state, dead.last_error, dead.finished_at) == (
        "once",
        "dead",
        EXPIRED,
        T0 + 10,
    )
    assert [job.id for job in await backend.dlq_list("q", limit=None)] == ["once"]


async def test_sweep_prunes_done_jobs_past_retention(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="old"), new_job(id="young")])
    leases = await backend.lease("q", limit=2, now=T0, lease_seconds=30.0)
    tokens = {lease.job.id: lease.token for lease in leases}
    await backend.settle(
        [done("old", tokens["old"], at=T0), done("young", tokens["young"], at=T0 + 50)], now=T0
    )
    result = await backend.sweep(now=T0 + 101, retain_done=100.0, expired_error=EXPIRED)
    assert result.pruned == 1
    assert await row_of(backend, "old") is None
    assert (await row_of(backend, "young")).state == "done"  # type: ignore[union-attr]


# -- operating --------------------------------------------------------------------------------
async def test_purge_deletes_live_and_done_jobs_and_counts_live_ones(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([new_job(id=f"p{n}") for n in range(5)] + [new_job("other", id="o")])
    leases = await backend.lease("q", limit=3, now=T0, lease_seconds=30.0)
    await backend.settle(
        [
            done(leases[0].job.id, leases[0].token),
            Settlement(job_id=leases[1].job.id, token=leases[1].token, outcome="dead", at=T0),
        ],
        now=T0,
    )
    assert await backend.purge("q") == 3  # 2 pending + 1 inflight; done deleted, not counted
    assert await row_of(backend, leases[0].job.id) is None
    assert await backend.size("q") == 0
    assert await backend.dlq_size("q") == 1
    assert await backend.size("other") == 1


async def test_dlq_lists_newest_failure_first_with_a_limit(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id=f"d{n}") for n in range(3)])
    leases = await backend.lease("q", limit=3, now=T0, lease_seconds=30.0)
    await backend.settle(
        [
            Settlement(job_id=lease.job.id, token=lease.token, outcome="dead", at=T0 + at)
            for lease, at in zip(leases, (5, 9, 1), strict=True)
        ],
        now=T0 + 9,
    )
    assert [job.id for job in await backend.dlq_list("q", limit=None)] == ["d1", "d0", "d2"]
    assert [job.id for job in await backend.dlq_list("q", limit=2)] == ["d1", "d0"]
    assert await backend.dlq_list("q", limit=0) == []
    assert await backend.dlq_size("q") == 3


async def test_dlq_retry_returns_the_dead_job_and_makes_it_due(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="r")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    await backend.settle(
        [Settlement(job_id="r", token=lease.token, outcome="dead", at=T0 + 1, error="bad")],
        now=T0 + 1,
    )
    before = await backend.dlq_retry("r", now=T0 + 20)
    assert before is not None
    assert (before.state, before.attempts, before.finished_at, before.last_error) == (
        "dead",
        1,
        T0 + 1,
        "bad",
    )
    assert await backend.dlq_size("q") == 0
    [again] = await backend.lease("q", limit=1, now=T0 + 20, lease_seconds=30.0)
    assert (again.job.id, again.job.attempts, again.job.available_at) == ("r", 1, T0 + 20)
    assert await backend.dlq_retry("r", now=T0 + 21) is None


async def test_dlq_retry_of_an_unknown_or_live_job_returns_none(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="live")])
    assert await backend.dlq_retry("live", now=T0) is None
    assert await backend.dlq_retry("missing", now=T0) is None


async def test_dlq_purge_deletes_only_dead_jobs_of_the_queue(backend: LocalBackend) -> None:
    await backend.enqueue([new_job(id="a1"), new_job(id="a2"), new_job("b", id="b1")])
    for queue in ("q", "b"):
        leases = await backend.lease(queue, limit=1, now=T0, lease_seconds=30.0)
        await backend.settle(
            [Settlement(job_id=le.job.id, token=le.token, outcome="dead", at=T0) for le in leases],
            now=T0,
        )
    assert await backend.dlq_purge("q") == 1
    assert await backend.dlq_size("q") == 0
    assert await backend.dlq_size("b") == 1
    assert await backend.size("q") == 1


# -- text SQLite's JSON functions cannot carry ------------------------------------------------
async def test_text_with_nul_characters_is_stored_exactly(backend: LocalBackend) -> None:
    payload = '{"raw": "a\x00b"}'
    job = new_job(id="job-nul", payload=payload)
    await backend.enqueue([new_job(id="plain"), job])
    leases = await backend.lease("q", limit=2, now=T0, lease_seconds=30.0)
    assert [lease.job.payload for lease in leases] == ['{"n": 1}', payload]
    retry = Settlement(
        job_id="job-nul", token=leases[1].token, outcome="retry", at=T0, error="bad\x00byte"
    )
    plain = done("plain", leases[0].token)
    assert await backend.settle([retry, plain], now=T0) == [True, True]
    stored = await row_of(backend, "job-nul")
    assert stored is not None
    assert stored.last_error == "bad\x00byte"


async def test_a_payload_that_is_not_valid_unicode_is_refused(backend: LocalBackend) -> None:
    with pytest.raises(BadArgumentError) as info:
        await backend.enqueue([new_job(id="ok"), new_job(id="bad", payload='"\udc80"')])
    assert info.value.code == "queue/bad-payload"
    assert await backend.size("q") == 0


async def test_an_error_that_is_not_valid_unicode_is_escaped_not_lost(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([new_job(id="job-u")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=30.0)
    dead = Settlement(
        job_id="job-u", token=lease.token, outcome="dead", at=T0, error="no file '\udcff'"
    )
    assert await backend.settle([dead], now=T0) == [True]
    [letter] = await backend.dlq_list("q", limit=None)
    assert letter.last_error == "no file '\\udcff'"


# -- chosen ids (JobIds) ------------------------------------------------------------------
async def test_enqueue_absent_stores_only_the_ids_not_held_and_the_first_of_a_repeat(
    backend: LocalBackend,
) -> None:
    await backend.enqueue([new_job(id="held")])
    ids = ["a", "held", "b", "a", "c"]
    batch = [new_job(id=job_id, payload=f'"{n}"') for n, job_id in enumerate(ids)]
    assert await backend.enqueue_absent(batch) == [True, False, True, False, True]
    assert await leased_ids(backend) == ["held", "a", "b", "c"]
    assert await backend.enqueue_absent([]) == []
