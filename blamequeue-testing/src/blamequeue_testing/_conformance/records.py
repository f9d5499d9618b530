"""Shared records (``Capabilities.records``): the small keyed state batches, schedules,
metrics and pause flags keep in the store, seen alike by every process sharing it.

Checked through ``Queue.records()`` (the core's one door to them), with the virtual clock
deciding expiry.  Backends without the capability refuse with ``queue/records-unsupported``.
"""

from __future__ import annotations

import json

import anyio
import pytest

from blamequeue import QueueError
from blamequeue._records import decode_value

from .fixtures import Conformance
from .refusals import refused, refused_at_once
from .requirements import lacking, requires

__all__ = ["TestRecords", "TestWithoutRecords"]


@requires("records", "the backend keeps no shared records")
class TestRecords:
    def _kind(self, conformance: Conformance) -> str:
        # Kinds are global to the store: each test uses its own, named after its queue.
        return f"test.{conformance.name}"

    async def test_put_then_get_round_trips_the_value(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        assert await store.put(kind, "a", {"n": 1, "s": "é"})
        record = await store.get(kind, "a")
        assert record is not None
        assert (record.kind, record.key, record.expires_at) == (kind, "a", None)
        assert json.loads(record.value or b"") == {"n": 1, "s": "é"}
        assert dict(record.counters) == {}
        assert await store.get(kind, "missing") is None
        assert await store.get_value(kind, "missing") is None

    async def test_put_replaces_the_value_and_keeps_counters(
        self, conformance: Conformance
    ) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        await store.add(kind, "k", {"done": 2})
        await store.put(kind, "k", "first")
        await store.put(kind, "k", "second")
        record = await store.get(kind, "k")
        assert decode_value(record) == "second"
        assert record is not None
        assert dict(record.counters) == {"done": 2}

    async def test_if_absent_claims_once(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        assert await store.put(kind, "slot", "me", if_absent=True)
        assert not await store.put(kind, "slot", "you", if_absent=True)
        assert await store.get_value(kind, "slot") == "me"

    async def test_concurrent_claims_have_one_winner(self, conformance: Conformance) -> None:
        kind = self._kind(conformance)
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(conformance.queue, other)
            stores = [conformance.queue.records(), other.records()]
            wins: list[int] = []

            async def claim(i: int) -> None:
                if await stores[i % 2].put(kind, "slot", i, if_absent=True):
                    wins.append(i)

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(claim, i)
            assert len(wins) == 1
            assert await stores[1].get_value(kind, "slot") == wins[0]

    async def test_expired_records_are_gone_and_can_be_claimed_again(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("record expiry is read from the queue's clock")
        store, kind = conformance.queue.records(), self._kind(conformance)
        now = conformance.now()
        assert await store.put(kind, "slot", 1, expires_at=now + 60, if_absent=True)
        assert not await store.put(kind, "slot", 2, if_absent=True)
        conformance.clock.advance(60)
        assert await store.get(kind, "slot") is None
        assert await store.list(kind) == []
        assert await store.put(kind, "slot", 3, if_absent=True)
        record = await store.get(kind, "slot")
        assert decode_value(record) == 3
        assert record is not None
        assert record.expires_at is None

    async def test_add_creates_counts_and_sets_expiry(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        expires = conformance.now() + 3600
        record, applied = await store.add(kind, "m", {"done": 1, "ms": 2.5}, expires_at=expires)
        assert applied
        assert dict(record.counters) == {"done": 1, "ms": 2.5}
        assert record.value is None
        assert record.expires_at == expires
        record, _ = await store.add(kind, "m", {"done": 2, "failed": 1})
        assert dict(record.counters) == {"done": 3, "ms": 2.5, "failed": 1}
        assert record.expires_at == expires  # kept when not given

    async def test_add_with_a_token_applies_once(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        first, applied = await store.add(kind, "batch", {"pending": -1}, once="job-1")
        assert applied
        assert dict(first.counters) == {"pending": -1}
        again, applied = await store.add(kind, "batch", {"pending": -1}, once="job-1")
        assert not applied
        assert dict(again.counters) == {"pending": -1}
        later, applied = await store.add(kind, "batch", {"pending": -1}, once="job-2")
        assert applied
        assert dict(later.counters) == {"pending": -2}

    async def test_concurrent_adds_lose_nothing(self, conformance: Conformance) -> None:
        kind = self._kind(conformance)
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(conformance.queue, other)
            stores = [conformance.queue.records(), other.records()]

            async def bump(i: int) -> None:
                await stores[i % 2].add(kind, "n", {"hits": 1, "odd": i % 2}, once=f"t{i % 30}")

            async with anyio.create_task_group() as tg:
                for i in range(40):
                    tg.start_soon(bump, i)
            record = await stores[0].get(kind, "n")
            assert record is not None
            # 30 distinct tokens: the 10 repeats added nothing.
            assert dict(record.counters) == {"hits": 30, "odd": 15}

    async def test_list_orders_by_key_with_prefix_and_limit(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        for key in ["b:2", "a:1", "b:1", "c", "b:10"]:
            await store.put(kind, key, key)
        await store.put(f"{kind}.other", "b:0", "elsewhere")
        listed = await store.list(kind, prefix="b:")
        assert [r.key for r in listed] == ["b:1", "b:10", "b:2"]
        assert [decode_value(r) for r in listed] == ["b:1", "b:10", "b:2"]
        assert [r.key for r in await store.list(kind, limit=2)] == ["a:1", "b:1"]
        assert [r.key for r in await store.list(kind)] == ["a:1", "b:1", "b:10", "b:2", "c"]

    async def test_get_many_keeps_the_order_of_the_keys(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        await store.put(kind, "x", 1)
        await store.add(kind, "y", {"n": 5})
        got = await store.get_many(kind, ["y", "nope", "x"])
        assert [None if r is None else r.key for r in got] == ["y", None, "x"]
        assert got[0] is not None
        assert dict(got[0].counters) == {"n": 5}
        assert await store.get_many(kind, []) == []

    async def test_delete_removes_value_counters_and_tokens(self, conformance: Conformance) -> None:
        store, kind = conformance.queue.records(), self._kind(conformance)
        await store.put(kind, "d", "v")
        await store.add(kind, "d", {"n": 1}, once="t")
        assert await store.delete(kind, "d")
        assert not await store.delete(kind, "d")
        assert await store.get(kind, "d") is None
        record, applied = await store.add(kind, "d", {"n": 1}, once="t")
        assert applied
        assert dict(record.counters) == {"n": 1}

    async def test_sweep_prunes_expired_records(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("record expiry is read from the queue's clock")
        store, kind = conformance.queue.records(), self._kind(conformance)
        await store.put(kind, "old", 1, expires_at=conformance.now() + 1)
        await store.put(kind, "kept", 2)
        conformance.clock.advance(2)
        await conformance.queue.sweep()
        assert [r.key for r in await store.list(kind)] == ["kept"]

    async def test_bad_kind_or_key_is_refused(self, conformance: Conformance) -> None:
        store = conformance.queue.records()
        for kind, key in [("", "k"), ("k", ""), ("k\0", "k")]:
            await refused("queue/bad-argument", store.put(kind, key, 1))
        for deltas in [{"n": float("nan")}, {"n": True}, {"": 1}, {"n": "1"}]:
            with pytest.raises(QueueError) as caught:
                await store.add("k", "k", deltas)  # type: ignore[arg-type]
            assert caught.value.code == "queue/bad-argument"
        assert await store.get("k", "k") is None


@lacking("records", "TestRecords covers it")
class TestWithoutRecords:
    async def test_records_are_refused_with_a_clear_code(self, conformance: Conformance) -> None:
        caught = refused_at_once("queue/records-unsupported", conformance.queue.records)
        assert "records" in str(caught)
        for call in [
            conformance.queue.pause(conformance.name),
            conformance.queue.is_paused(conformance.name),
            conformance.queue.metrics(conformance.name),
        ]:
            await refused("queue/records-unsupported", call)
