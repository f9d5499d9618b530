"""SPEC §3.6 flows: a graph of jobs registered atomically, children parked until every job they
depend on is done, then due at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from blamequeue import FlowChild, FlowResult, Job, JobContext, QueueError

from .fixtures import BACKEND, Conformance, fail, succeed, wait_until
from .refusals import refused
from .requirements import lacking, requires
from .running import Recorder, consuming

__all__ = ["TestFlowValidation", "TestFlows", "TestWithoutFlows"]

SECRET = "flow-payload-secret-41c9"


async def _run(conformance: Conformance, handler: Any = succeed, max: int = 100) -> int:
    """Tick once; return how many jobs were leased."""
    result = await conformance.queue.tick(conformance.name, handler, max=max)
    return result.leased


async def _flow(conformance: Conformance, children: Any) -> FlowResult:
    """Register ``children`` as one flow on the test's queue."""
    return await conformance.queue.enqueue_flow(conformance.name, children)


def fetch_then_parse() -> list[FlowChild]:
    """Two children: ``fetch``, and ``parse``, which depends on it (payloads: their names)."""
    return [
        FlowChild(name="fetch", payload="fetch"),
        FlowChild(name="parse", payload="parse", depends_on=["fetch"]),
    ]


@requires("flows", "the backend cannot park and release flow children")
class TestFlows:
    async def test_child_waits_parked_until_its_dependency_is_done(
        self, conformance: Conformance
    ) -> None:
        await _flow(conformance, fetch_then_parse())
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert record.seen == ["fetch"]
        # Due at once: no clock advance needed.
        assert await _run(conformance, record) == 1
        assert record.seen == ["fetch", "parse"]
        assert await conformance.size() == 0

    async def test_parked_child_is_never_leased_while_its_dependency_is_pending(
        self, conformance: Conformance
    ) -> None:
        await _flow(
            conformance,
            [
                FlowChild(name="first", payload=1, priority=-5),
                FlowChild(name="second", payload=2, depends_on=["first"], priority=100),
            ],
        )
        record = Recorder()
        assert await _run(conformance, record, max=1) == 1
        assert record.seen == [1]  # the higher priority of the parked child does not matter

    async def test_child_waits_for_every_dependency(self, conformance: Conformance) -> None:
        await _flow(
            conformance,
            [
                {"name": "a", "payload": "a"},
                {"name": "b", "payload": "b"},
                {"name": "join", "payload": "join", "depends_on": ["a", "b"]},
            ],
        )
        record = Recorder()
        assert await _run(conformance, record, max=1) == 1
        assert record.seen == ["a"]
        assert await _run(conformance, record, max=1) == 1
        assert record.seen == ["a", "b"]
        assert await _run(conformance, record) == 1
        assert record.seen == ["a", "b", "join"]

    async def test_released_child_is_due_at_the_completion_of_its_last_dependency(
        self, conformance: Conformance
    ) -> None:
        await _flow(
            conformance, [{"name": "a"}, {"name": "b", "payload": "b", "depends_on": ["a"]}]
        )
        conformance.advance(42)
        completed_at = conformance.now()
        assert await _run(conformance) == 1
        conformance.advance(1)
        record = Recorder()
        assert await _run(conformance, record) == 1
        [child] = record.jobs
        assert child.available_at == datetime.fromtimestamp(completed_at, UTC)

    async def test_diamond_runs_the_join_once_after_both_branches(
        self, conformance: Conformance
    ) -> None:
        await _flow(
            conformance,
            [
                FlowChild(name="root", payload="root"),
                FlowChild(name="left", payload="left", depends_on=("root",)),
                FlowChild(name="right", payload="right", depends_on=("root",)),
                FlowChild(name="join", payload="join", depends_on=("left", "right")),
            ],
        )
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert await _run(conformance, record) == 2  # both branches at once
        assert await _run(conformance, record) == 1
        assert await _run(conformance, record) == 0
        assert record.seen == ["root", "left", "right", "join"]

    async def test_deep_chain_runs_in_dependency_order(self, conformance: Conformance) -> None:
        # Declared out of order: dependencies may name siblings declared later.
        children = [
            FlowChild(name=f"step{n}", payload=n, depends_on=[f"step{n - 1}"] if n else [])
            for n in reversed(range(5))
        ]
        await _flow(conformance, children)
        record = Recorder()
        for _ in range(5):
            assert await _run(conformance, record) == 1
        assert record.seen == [0, 1, 2, 3, 4]

    async def test_flow_result_lists_children_in_declaration_order(
        self, conformance: Conformance
    ) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="z", payload=1),
                {"name": "a", "payload": 2, "depends_on": ["z"]},
                FlowChild(name="m", payload=3, depends_on=["a", "z"]),
            ],
        )
        assert isinstance(result, FlowResult)
        assert result.flow_id.startswith("flow-")
        assert [job.name for job in result.jobs] == ["z", "a", "m"]
        ids = [job.job_id for job in result.jobs]
        assert len(set(ids)) == 3
        assert all(job_id.startswith("job-") for job_id in ids)
        record = Recorder()
        for _ in range(3):
            await _run(conformance, record)
        assert [job.id for job in record.jobs] == ids
        assert {job.flow_id for job in record.jobs} == {result.flow_id}

    async def test_each_flow_gets_its_own_id(self, conformance: Conformance) -> None:
        first = await _flow(conformance, [{"name": "a"}])
        second = await _flow(conformance, [{"name": "a"}])
        assert first.flow_id != second.flow_id

    async def test_children_keep_their_own_options(self, conformance: Conformance) -> None:
        await _flow(
            conformance,
            [
                FlowChild(
                    name="a",
                    payload={"n": 1},
                    max_attempts=7,
                    classification="internal",
                    trace_id="trace-a",
                ),
                FlowChild(name="b", payload={"n": 2}, depends_on=["a"], trace_id="trace-b"),
            ],
        )
        record = Recorder()
        await _run(conformance, record)
        await _run(conformance, record)
        a, b = record.jobs
        assert (a.payload, a.max_attempts, a.classification, a.trace_id) == (
            {"n": 1},
            7,
            "internal",
            "trace-a",
        )
        assert (b.payload, b.max_attempts, b.trace_id) == ({"n": 2}, 5, "trace-b")

    async def test_due_children_follow_priority(self, conformance: Conformance) -> None:
        await _flow(
            conformance,
            [
                FlowChild(name="root", payload="root"),
                FlowChild(name="low", payload="low", depends_on=["root"], priority=1),
                FlowChild(name="high", payload="high", depends_on=["root"], priority=9),
            ],
        )
        record = Recorder()
        await _run(conformance, record)
        await _run(conformance, record)
        assert record.seen == ["root", "high", "low"]

    async def test_child_waits_while_its_dependency_retries(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await _flow(
            conformance,
            [
                {"name": "flaky", "payload": "flaky"},
                {"name": "next", "payload": "next", "depends_on": ["flaky"]},
            ],
        )
        assert (await q.tick(name, fail)).failed == 1
        assert await _run(conformance) == 0  # flaky backs off, next stays parked
        conformance.advance(1)
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert await _run(conformance, record) == 1
        assert record.seen == ["flaky", "next"]

    async def test_child_of_a_dead_dependency_stays_parked_until_it_is_retried(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the dependency cannot be dead-lettered and retried")
        q, name = conformance.queue, conformance.name
        result = await _flow(
            conformance,
            [
                FlowChild(name="charge", payload="charge", max_attempts=1),
                FlowChild(name="ship", payload="ship", depends_on=["charge"]),
            ],
        )
        charge, ship = (job.job_id for job in result.jobs)
        assert (await q.tick(name, fail)).moved_to_dlq == 1
        for _ in range(3):
            conformance.advance(24 * 3600)
            await q.sweep()
            assert await _run(conformance) == 0
        assert await conformance.size() == 1  # ship, parked
        assert (await q.flow_status(result.flow_id)).states == {"charge": "dead", "ship": "parked"}

        assert await q.dlq_retry(charge) is True
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert await _run(conformance, record) == 1
        assert [job.id for job in record.jobs] == [charge, ship]
        assert await conformance.size() == 0

    async def test_child_is_released_when_its_dependency_is_deleted_on_completion(
        self, conformance: Conformance
    ) -> None:
        async with conformance.factory.open(retain_done=0) as q:
            name = conformance.name
            await q.enqueue_flow(name, [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
            assert (await q.tick(name, succeed)).succeeded == 1
            assert (await q.tick(name, succeed)).succeeded == 1
            assert await q.size(name) == 0

    async def test_consumer_runs_released_children_without_waiting_for_its_poll(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        record = Recorder()
        # A poll interval far beyond the safety net: only the release's wake-up can deliver.
        async with consuming(q, name, record, poll_interval=3600):
            await q.enqueue_flow(
                name,
                [
                    {"name": "a", "payload": "a"},
                    {"name": "b", "payload": "b", "depends_on": ["a"]},
                    {"name": "c", "payload": "c", "depends_on": ["b"]},
                ],
            )
            await wait_until(lambda: len(record.seen) == 3, "the whole chain to run")
        assert record.seen == ["a", "b", "c"]

    # -- size, purge ---------------------------------------------------------------------------
    async def test_size_counts_parked_children(self, conformance: Conformance) -> None:
        await _flow(
            conformance,
            [
                {"name": "a"},
                {"name": "b", "depends_on": ["a"]},
                {"name": "c", "depends_on": ["a", "b"]},
            ],
        )
        assert await conformance.size() == 3
        await _run(conformance)
        assert await conformance.size() == 2

    async def test_purge_deletes_parked_children(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        result = await _flow(conformance, [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
        assert await q.purge(name) == 2
        assert await conformance.size() == 0
        conformance.advance(3600)
        assert await _run(conformance) == 0
        await refused("queue/job-not-found", q.flow_status(result.flow_id))

    # -- flow_status ----------------------------------------------------------------------------
    async def test_flow_status_reports_each_child_by_name(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        result = await _flow(conformance, [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
        status = await q.flow_status(result.flow_id)
        assert status.flow_id == result.flow_id
        assert [(c.name, c.job_id, c.state) for c in status.children] == [
            ("a", result.jobs[0].job_id, "pending"),
            ("b", result.jobs[1].job_id, "parked"),
        ]
        during: list[dict[str, str]] = []

        async def look(job: Job, ctx: JobContext) -> None:
            during.append(dict((await q.flow_status(result.flow_id)).states))

        await q.tick(name, look)
        assert during == [{"a": "inflight", "b": "parked"}]
        assert (await q.flow_status(result.flow_id)).states == {"a": "done", "b": "pending"}
        await q.tick(name, succeed)
        assert (await q.flow_status(result.flow_id)).states == {"a": "done", "b": "done"}

    async def test_flow_status_lists_only_children_still_stored(
        self, conformance: Conformance
    ) -> None:
        async with conformance.factory.open(retain_done=10) as q:
            name = conformance.name
            result = await q.enqueue_flow(name, [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
            await q.tick(name, succeed)
            conformance.advance(11)
            await q.sweep()  # prunes a
            assert (await q.flow_status(result.flow_id)).states == {"b": "pending"}
            await q.tick(name, succeed)
            conformance.advance(11)
            await q.sweep()
            await refused("queue/job-not-found", q.flow_status(result.flow_id))

    async def test_flow_status_of_an_unknown_flow_is_not_found(
        self, conformance: Conformance
    ) -> None:
        await refused("queue/job-not-found", conformance.queue.flow_status("flow-" + "0" * 26))

    # -- audit --------------------------------------------------------------------------------
    async def test_registration_emits_one_flow_register_event(
        self, conformance: Conformance
    ) -> None:
        result = await _flow(
            conformance,
            [{"name": "a", "payload": {"card": SECRET}}, {"name": "b", "depends_on": ["a"]}],
        )
        [event] = conformance.audit.named("system.queue.flow.register")
        assert (event.backend, event.queue) == (BACKEND, conformance.name)
        assert event.data == {"flow_id": result.flow_id, "jobs": 2}
        assert event.time == datetime.fromtimestamp(conformance.now(), UTC)
        assert SECRET not in repr(event)

    # -- atomic registration --------------------------------------------------------------------
    async def test_a_bad_child_stores_nothing(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "already here")
        await refused(
            "queue/bad-payload",
            q.enqueue_flow(
                name,
                [
                    {"name": "fine", "payload": 1},
                    {"name": "bad", "payload": object(), "depends_on": ["fine"]},
                ],
            ),
        )
        assert await conformance.size() == 1
        assert conformance.audit.named("system.queue.flow.register") == []


# Specifications every backend refuses the same way, before anything is stored.
_BAD_FLOWS: list[tuple[str, Any]] = [
    ("not-a-list", "a"),
    ("a-mapping", {"name": "a"}),
    ("none", None),
    ("empty", []),
    ("child-not-a-mapping", [42]),
    ("child-is-a-string", ["a"]),
    ("missing-name", [{"payload": 1}]),
    ("empty-name", [{"name": ""}]),
    ("blank-name", [{"name": "  "}]),
    ("non-string-name", [{"name": 5}]),
    ("duplicate-name", [{"name": "a"}, {"name": "a"}]),
    ("unknown-key", [{"name": "a", "delay": 5}]),
    ("depends-on-a-string", [{"name": "a"}, {"name": "b", "depends_on": "a"}]),
    ("depends-on-a-non-string", [{"name": "a"}, {"name": "b", "depends_on": [1]}]),
    ("depends-on-none", [{"name": "a", "depends_on": None}]),
]


async def _refused_storing_nothing(
    conformance: Conformance, code: str, children: Any
) -> QueueError:
    """``enqueue_flow`` of ``children`` on the test's queue is refused with ``code`` and
    stores nothing; the error."""
    error = await refused(code, conformance.queue.enqueue_flow(conformance.name, children))
    assert await conformance.size() == 0
    return error


@requires("flows", "enqueue_flow refuses with queue/flow-unsupported first")
class TestFlowValidation:
    @pytest.mark.parametrize(("case", "children"), _BAD_FLOWS, ids=[c for c, _ in _BAD_FLOWS])
    async def test_malformed_flow_is_bad_flow(
        self, conformance: Conformance, case: str, children: Any
    ) -> None:
        await _refused_storing_nothing(conformance, "queue/bad-flow", children)

    @pytest.mark.parametrize("queue_name", ["", None, 5])
    async def test_missing_queue_name_is_bad_flow(
        self, conformance: Conformance, queue_name: Any
    ) -> None:
        await refused("queue/bad-flow", conformance.queue.enqueue_flow(queue_name, [{"name": "a"}]))

    async def test_unknown_dependency(self, conformance: Conformance) -> None:
        error = await _refused_storing_nothing(
            conformance,
            "queue/flow-unknown-dep",
            [{"name": "a"}, {"name": "b", "depends_on": ["a", "ghost"]}],
        )
        assert "ghost" in error.message

    async def test_self_dependency_is_a_cycle(self, conformance: Conformance) -> None:
        error = await _refused_storing_nothing(
            conformance,
            "queue/flow-cycle",
            [{"name": "a"}, {"name": "loop", "depends_on": ["loop"]}],
        )
        assert "loop" in error.message

    async def test_cycle_names_its_children(self, conformance: Conformance) -> None:
        error = await _refused_storing_nothing(
            conformance,
            "queue/flow-cycle",
            [
                {"name": "start"},
                {"name": "x", "depends_on": ["start", "z"]},
                {"name": "y", "depends_on": ["x"]},
                {"name": "z", "depends_on": ["y"]},
            ],
        )
        assert all(child in error.message for child in ("x", "y", "z"))
        assert "start" not in error.message

    @pytest.mark.parametrize(
        "child",
        [
            {"name": "a", "priority": "high"},
            {"name": "a", "priority": 2**40},
            {"name": "a", "priority": True},
            {"name": "a", "max_attempts": 0},
            {"name": "a", "classification": 3},
            {"name": "a", "trace_id": ["t"]},
        ],
        ids=[
            "str-priority",
            "huge-priority",
            "bool-priority",
            "zero-attempts",
            "int-classification",
            "list-trace-id",
        ],
    )
    async def test_bad_child_option_is_bad_argument_naming_the_child(
        self, conformance: Conformance, child: dict[str, Any]
    ) -> None:
        error = await _refused_storing_nothing(
            conformance, "queue/bad-argument", [{"name": "ok"}, child]
        )
        assert "'a'" in error.message

    async def test_unserialisable_payload_is_bad_payload(self, conformance: Conformance) -> None:
        await _refused_storing_nothing(
            conformance, "queue/bad-payload", [{"name": "a", "payload": {1, 2}}]
        )


@lacking("flows", "covered by TestFlows")
class TestWithoutFlows:
    async def test_enqueue_flow_raises_flow_unsupported(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await refused(
            "queue/flow-unsupported",
            q.enqueue_flow(name, [{"name": "a"}, {"name": "b", "depends_on": ["a"]}]),
        )
        assert await conformance.size() == 0
        await refused("queue/flow-unsupported", q.flow_status("flow-" + "0" * 26))
