"""Flow validation and planning (blamequeue._flows), and what the conformance suite cannot
reach with the shipped backends: a backend without flows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest

from blamequeue import FlowChild, Queue, QueueError
from blamequeue._flows import FLOW_NAME_KEY, flow_name, parse_flow, plan_flow, with_flow_name
from blamequeue._ids import new_job_id
from blamequeue.abc import NewJob
from blamequeue_testing import MemoryBackend


def _job(child: FlowChild) -> NewJob:
    return NewJob(
        id=new_job_id(),
        queue="q",
        payload=json.dumps(child.payload),
        priority=child.priority,
        max_attempts=child.max_attempts or 5,
        created_at=100.0,
        available_at=100.0,
        meta='{"backoff":[1,2]}' if child.name == "b" else None,
    )


def _error(children: Any) -> QueueError:
    with pytest.raises(QueueError) as info:
        parse_flow(children)
    return info.value


def test_plan_parks_children_with_dependencies_on_their_siblings_ids() -> None:
    plan = plan_flow(
        [
            {"name": "a"},
            {"name": "b", "depends_on": ["a"]},
            {"name": "c", "depends_on": ["a", "b"]},
        ],
        _job,
    )
    a, b, c = plan.jobs
    assert plan.flow_id.startswith("flow-")
    assert len(plan.flow_id) == len("flow-") + 26
    assert plan.names == ["a", "b", "c"]
    assert {job.flow_id for job in plan.jobs} == {plan.flow_id}
    assert (a.parked, a.depends_on) == (False, ())
    assert (b.parked, b.depends_on) == (True, (a.id,))
    assert (c.parked, c.depends_on) == (True, (a.id, b.id))


def test_plan_keeps_existing_meta_and_adds_the_flow_name() -> None:
    plan = plan_flow([{"name": "a"}, {"name": "b"}], _job)
    assert [flow_name(job.meta) for job in plan.jobs] == ["a", "b"]
    assert json.loads(plan.jobs[1].meta or "") == {"backoff": [1, 2], FLOW_NAME_KEY: "b"}


def test_repeated_dependency_counts_once() -> None:
    [_, child] = parse_flow([{"name": "a"}, {"name": "b", "depends_on": ["a", "a"]}])
    assert child.depends_on == ("a",)


def test_flow_name_ignores_meta_without_one() -> None:
    assert flow_name(None) is None
    assert flow_name("not json") is None
    assert flow_name("[1]") is None
    assert flow_name('{"flow_name": 3}') is None
    assert flow_name(with_flow_name(None, "x")) == "x"


def test_cycle_message_follows_the_edges() -> None:
    error = _error(
        [
            {"name": "a", "depends_on": ["b"]},
            {"name": "b", "depends_on": ["c"]},
            {"name": "c", "depends_on": ["a"]},
        ]
    )
    assert error.code == "queue/flow-cycle"
    assert "a -> b -> c -> a" in error.message


def test_self_dependency_message_names_the_child() -> None:
    error = _error([{"name": "solo", "depends_on": ["solo"]}])
    assert error.code == "queue/flow-cycle"
    assert "'solo' depends on itself" in error.message


def test_a_shared_dependency_is_not_a_cycle() -> None:
    parse_flow(
        [
            {"name": "d", "depends_on": ["b", "c"]},
            {"name": "b", "depends_on": ["a"]},
            {"name": "c", "depends_on": ["a"]},
            {"name": "a"},
        ]
    )


def test_unknown_key_is_named() -> None:
    error = _error([{"name": "a", "dealy": 3}])
    assert (error.code, "'dealy'" in error.message) == ("queue/bad-flow", True)


def test_a_flowchild_with_a_string_depends_on_is_bad_flow() -> None:
    assert _error([FlowChild(name="a"), FlowChild(name="b", depends_on="a")]).code == (
        "queue/bad-flow"
    )


def test_bad_child_option_is_raised_naming_the_child() -> None:
    def refuse(child: FlowChild) -> NewJob:
        from blamequeue.errors import BadArgumentError

        raise BadArgumentError("queue/bad-argument", "priority must be an int")

    with pytest.raises(QueueError) as info:
        plan_flow([{"name": "a"}], refuse)
    assert info.value.code == "queue/bad-argument"
    assert info.value.message == "children[0] ('a'): priority must be an int"


# -- a backend without flows -----------------------------------------------------------------
@pytest.fixture
async def flowless_queue(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Queue]:
    monkeypatch.setattr(
        MemoryBackend, "capabilities", attrs.evolve(MemoryBackend.capabilities, flows=False)
    )
    async with Queue(backends={"m": {"protocol": "memory"}}) as queue:
        yield queue


@pytest.mark.anyio
async def test_enqueue_flow_on_a_backend_without_flows_stores_nothing(
    flowless_queue: Queue,
) -> None:
    with pytest.raises(QueueError) as info:
        await flowless_queue.enqueue_flow("q", [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
    assert info.value.code == "queue/flow-unsupported"
    assert "'m'" in info.value.message
    assert await flowless_queue.size("q") == 0


@pytest.mark.anyio
async def test_flow_status_on_a_backend_without_flows(flowless_queue: Queue) -> None:
    with pytest.raises(QueueError) as info:
        await flowless_queue.flow_status("flow-x")
    assert info.value.code == "queue/flow-unsupported"


@pytest.mark.anyio
async def test_flow_status_needs_a_flow_id() -> None:
    async with Queue(backends={"m": {"protocol": "memory"}}) as queue:
        for bad in ("", None, 3):
            with pytest.raises(QueueError) as info:
                await queue.flow_status(bad)  # type: ignore[arg-type]
            assert info.value.code == "queue/bad-argument"


@pytest.mark.anyio
async def test_flow_calls_need_a_started_queue() -> None:
    queue = Queue(backends={"m": {"protocol": "memory"}})
    with pytest.raises(QueueError) as info:
        await queue.enqueue_flow("q", [{"name": "a"}])
    assert info.value.code == "queue/not-initialized"
