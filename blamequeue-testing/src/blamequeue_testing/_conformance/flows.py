"""SPEC §3.6 flows: a graph of jobs registered atomically, children parked until every job they
depend on is done, then due at once; and SPEC §15's flow controls: children on other queues
(``FlowChild.queue_name``) and what a child does when a job it waits for dies
(``FlowChild.on_dependency_failure``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from blamequeue import FlowChild, FlowResult, Job, JobContext, QueueError, UnrecoverableError

from .fixtures import BACKEND, Conformance, fail, succeed, wait_until
from .refusals import refused
from .requirements import lacking, requires
from .running import Recorder, consuming

__all__ = [
    "TestFlowAcrossQueues",
    "TestFlowPolicies",
    "TestFlowValidation",
    "TestFlows",
    "TestWithoutCrossQueueFlows",
    "TestWithoutFlowPolicies",
    "TestWithoutFlows",
]

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
    (
        "unknown-policy",
        [{"name": "a"}, {"name": "b", "depends_on": ["a"], "on_dependency_failure": "retry"}],
    ),
    ("policy-not-a-string", [{"name": "a", "on_dependency_failure": None}]),
    ("policy-in-capitals", [{"name": "a", "on_dependency_failure": "FAIL"}]),
    ("empty-child-queue", [{"name": "a", "queue_name": ""}]),
    ("blank-child-queue", [{"name": "a", "queue_name": "   "}]),
    ("non-string-child-queue", [{"name": "a", "queue_name": 5}]),
    ("child-queue-with-a-control-character", [{"name": "a", "queue_name": "q\x00"}]),
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


async def _dies(conformance: Conformance, how: str, job_id: str) -> None:
    """Make the pending flow job ``job_id`` (the only due job of the test's queue, enqueued
    with ``max_attempts=1``) end dead or cancelled: ``attempts`` (its handler fails),
    ``unrecoverable`` (its handler raises UnrecoverableError), ``lease`` (its worker dies and
    the sweep finds its last lease expired) or ``cancel``."""
    q, name = conformance.queue, conformance.name
    if how == "attempts":
        assert (await q.tick(name, fail)).moved_to_dlq == 1
    elif how == "unrecoverable":

        async def unrecoverable(job: Job, ctx: JobContext) -> None:
            raise UnrecoverableError("the card was declined")

        assert (await q.tick(name, unrecoverable)).moved_to_dlq == 1
    elif how == "lease":
        conformance.require_virtual_leases()

        async def kills_its_worker(job: Job, ctx: JobContext) -> None:
            conformance.advance(31)
            assert await q.sweep() == 1

        assert (await q.tick(name, kills_its_worker, lease=30)).stale == 1
    else:
        conformance.require("cancel", "the dependency cannot be cancelled")
        assert await q.cancel(job_id) is True


_DEATHS = ["attempts", "unrecoverable", "lease", "cancel"]


async def _states(conformance: Conformance, result: FlowResult) -> dict[str, str]:
    return dict((await conformance.queue.flow_status(result.flow_id)).states)


@requires("flow_policies", "the backend keeps children parked whatever their dependencies do")
class TestFlowPolicies:
    @pytest.mark.parametrize("how", _DEATHS)
    async def test_fail_child_is_dead_lettered_when_its_dependency_dies(
        self, conformance: Conformance, how: str
    ) -> None:
        conformance.require("dlq", "the failed child cannot be looked at")
        q, name = conformance.queue, conformance.name
        result = await _flow(
            conformance,
            [
                FlowChild(name="charge", payload={"card": SECRET}, max_attempts=1),
                FlowChild(name="ship", depends_on=["charge"], on_dependency_failure="fail"),
            ],
        )
        charge, ship = (job.job_id for job in result.jobs)
        await _dies(conformance, how, charge)
        assert await _states(conformance, result) == {
            "charge": "cancelled" if how == "cancel" else "dead",
            "ship": "dead",
        }
        assert await conformance.size() == 0
        letter = next(d for d in await q.dlq_list(name) if d.job_id == ship)
        assert letter.last_error is not None
        assert "'charge'" in letter.last_error
        assert charge in letter.last_error
        assert SECRET not in letter.last_error
        assert letter.attempts == 0
        assert letter.failed_at == datetime.fromtimestamp(conformance.now(), UTC)
        assert await _run(conformance) == 0
        # Its death is in the audit trail like any job's that reaches the DLQ.
        audited = [e for e in conformance.audit.named("system.queue.dlq.write") if e.job_id == ship]
        assert [e.data for e in audited] == [
            {"attempts": 0, "error_type": "dependency-failed", "dependency": charge}
        ]

    @pytest.mark.parametrize("how", _DEATHS)
    async def test_ignore_child_is_released_when_its_dependency_dies(
        self, conformance: Conformance, how: str
    ) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="notify", payload="notify", max_attempts=1),
                FlowChild(
                    name="cleanup",
                    payload="cleanup",
                    depends_on=["notify"],
                    on_dependency_failure="ignore",
                ),
            ],
        )
        await _dies(conformance, how, result.jobs[0].job_id)
        assert (await _states(conformance, result))["cleanup"] == "pending"
        record = Recorder()
        assert await _run(conformance, record) == 1  # due at once
        assert record.seen == ["cleanup"]

    @pytest.mark.parametrize("how", _DEATHS)
    async def test_wait_child_stays_parked_when_its_dependency_dies(
        self, conformance: Conformance, how: str
    ) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="a", max_attempts=1),
                FlowChild(name="b", depends_on=["a"], on_dependency_failure="wait"),
            ],
        )
        await _dies(conformance, how, result.jobs[0].job_id)
        conformance.advance(3600)
        await conformance.queue.sweep()
        assert await _run(conformance) == 0
        assert (await _states(conformance, result))["b"] == "parked"
        assert await conformance.size() == 1

    async def test_each_dependant_follows_its_own_policy(self, conformance: Conformance) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="root", max_attempts=1),
                FlowChild(name="waits", depends_on=["root"]),
                FlowChild(name="fails", depends_on=["root"], on_dependency_failure="fail"),
                FlowChild(name="ignores", depends_on=["root"], on_dependency_failure="ignore"),
            ],
        )
        await _dies(conformance, "attempts", result.jobs[0].job_id)
        assert await _states(conformance, result) == {
            "root": "dead",
            "waits": "parked",
            "fails": "dead",
            "ignores": "pending",
        }

    async def test_fail_travels_down_as_far_as_the_children_that_fail(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the failed children cannot be looked at")
        q, name = conformance.queue, conformance.name
        result = await _flow(
            conformance,
            [
                FlowChild(name="extract", max_attempts=1),
                FlowChild(name="transform", depends_on=["extract"], on_dependency_failure="fail"),
                FlowChild(name="load", depends_on=["transform"], on_dependency_failure="fail"),
                FlowChild(name="report", depends_on=["load"]),
                FlowChild(name="archive", depends_on=["report"], on_dependency_failure="fail"),
            ],
        )
        ids = {job.name: job.job_id for job in result.jobs}
        await _dies(conformance, "attempts", ids["extract"])
        assert await _states(conformance, result) == {
            "extract": "dead",
            "transform": "dead",
            "load": "dead",
            "report": "parked",
            "archive": "parked",
        }
        errors = {d.job_id: d.last_error or "" for d in await q.dlq_list(name)}
        # Each names the dependency it waited for, not the job the failure started at.
        assert "'extract'" in errors[ids["transform"]]
        assert ids["extract"] in errors[ids["transform"]]
        assert "'transform'" in errors[ids["load"]]
        assert ids["transform"] in errors[ids["load"]]
        assert await conformance.size() == 2
        audited = {
            e.job_id: e.data.get("dependency")
            for e in conformance.audit.named("system.queue.dlq.write")
        }
        assert audited == {
            ids["extract"]: None,
            ids["transform"]: ids["extract"],
            ids["load"]: ids["transform"],
        }

    async def test_fail_travels_through_a_diamond_once(self, conformance: Conformance) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="root", max_attempts=1),
                FlowChild(name="left", depends_on=["root"], on_dependency_failure="fail"),
                FlowChild(name="right", depends_on=["root"], on_dependency_failure="fail"),
                FlowChild(name="join", depends_on=["left", "right"], on_dependency_failure="fail"),
            ],
        )
        await _dies(conformance, "attempts", result.jobs[0].job_id)
        assert set((await _states(conformance, result)).values()) == {"dead"}
        assert await conformance.dlq_size() == 4
        audited = [e.job_id or "" for e in conformance.audit.named("system.queue.dlq.write")]
        assert sorted(audited) == sorted(job.job_id for job in result.jobs)  # each once

    async def test_a_job_that_failed_with_its_dependency_releases_the_child_ignoring_it(
        self, conformance: Conformance
    ) -> None:
        result = await _flow(
            conformance,
            [
                FlowChild(name="fetch", max_attempts=1),
                FlowChild(name="parse", depends_on=["fetch"], on_dependency_failure="fail"),
                FlowChild(name="index", depends_on=["parse"], on_dependency_failure="fail"),
                FlowChild(
                    name="tidy",
                    payload="tidy",
                    depends_on=["index", "fetch"],
                    on_dependency_failure="ignore",
                ),
            ],
        )
        await _dies(conformance, "attempts", result.jobs[0].job_id)
        assert await _states(conformance, result) == {
            "fetch": "dead",
            "parse": "dead",
            "index": "dead",
            "tidy": "pending",
        }
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert record.seen == ["tidy"]

    async def test_ignore_child_still_waits_for_its_other_dependencies(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        result = await _flow(
            conformance,
            [
                FlowChild(name="optional", payload="optional", max_attempts=1, priority=9),
                FlowChild(name="needed", payload="needed"),
                FlowChild(
                    name="join",
                    payload="join",
                    depends_on=["optional", "needed"],
                    on_dependency_failure="ignore",
                ),
            ],
        )
        assert (await q.tick(name, fail, max=1)).moved_to_dlq == 1  # optional, first by priority
        assert (await _states(conformance, result))["join"] == "parked"
        record = Recorder()
        assert await _run(conformance, record, max=1) == 1
        assert record.seen == ["needed"]
        assert await _run(conformance, record) == 1
        assert record.seen == ["needed", "join"]

    async def test_ignore_child_is_released_by_a_death_after_its_other_dependency_is_done(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        result = await _flow(
            conformance,
            [
                FlowChild(name="needed", payload="needed", priority=9),
                FlowChild(name="optional", payload="optional", max_attempts=1),
                FlowChild(
                    name="join",
                    payload="join",
                    depends_on=["optional", "needed"],
                    on_dependency_failure="ignore",
                ),
            ],
        )
        assert (await q.tick(name, succeed, max=1)).succeeded == 1
        assert (await _states(conformance, result))["join"] == "parked"
        assert (await q.tick(name, fail, max=1)).moved_to_dlq == 1
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert record.seen == ["join"]

    async def test_wait_child_runs_once_its_retried_dependency_completes(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the dependency cannot be retried")
        q = conformance.queue
        result = await _flow(
            conformance,
            [
                FlowChild(name="charge", payload="charge", max_attempts=1),
                FlowChild(name="ship", payload="ship", depends_on=["charge"]),
                FlowChild(
                    name="refund",
                    payload="refund",
                    depends_on=["charge"],
                    on_dependency_failure="fail",
                ),
            ],
        )
        charge = result.jobs[0].job_id
        await _dies(conformance, "attempts", charge)
        assert await q.dlq_retry(charge) is True
        record = Recorder()
        assert await _run(conformance, record) == 1
        assert await _run(conformance, record) == 1
        assert record.seen == ["charge", "ship"]
        assert await _states(conformance, result) == {
            "charge": "done",
            "ship": "done",
            "refund": "dead",
        }

    async def test_consumer_runs_a_child_released_by_a_death_without_waiting_for_its_poll(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        record = Recorder()

        async def fails_the_first(job: Job, ctx: JobContext) -> None:
            await record(job, ctx)
            if job.payload == "first":
                raise UnrecoverableError("no")

        # A poll interval far beyond the safety net: only the release's wake-up can deliver.
        async with consuming(q, name, fails_the_first, poll_interval=3600):
            await _flow(
                conformance,
                [
                    FlowChild(name="first", payload="first"),
                    FlowChild(
                        name="second",
                        payload="second",
                        depends_on=["first"],
                        on_dependency_failure="ignore",
                    ),
                ],
            )
            await wait_until(lambda: len(record.seen) == 2, "the ignoring child to run")
        assert record.seen == ["first", "second"]


def _elsewhere(conformance: Conformance) -> str:
    """A second queue of the test's own."""
    return conformance.name + "-elsewhere"


@requires("cross_queue_flows", "the backend keeps a flow's children on the flow's queue")
class TestFlowAcrossQueues:
    async def test_child_on_another_queue_is_leased_by_that_queues_consumers(
        self, conformance: Conformance
    ) -> None:
        q, name, other = conformance.queue, conformance.name, _elsewhere(conformance)
        result = await _flow(
            conformance,
            [
                FlowChild(name="render", payload="render"),
                FlowChild(name="mail", payload="mail", depends_on=["render"], queue_name=other),
                FlowChild(name="log", payload="log", depends_on=["mail"], queue_name=None),
            ],
        )
        assert await q.size(other) == 1
        assert await conformance.size() == 2
        record = Recorder()
        assert (await q.tick(other, record)).leased == 0  # parked
        assert await _run(conformance, record, max=1) == 1
        assert await _run(conformance, record) == 0  # log waits for mail
        assert (await q.tick(other, record)).leased == 1
        assert record.jobs[-1].queue == other
        assert await _run(conformance, record) == 1
        assert record.seen == ["render", "mail", "log"]
        assert [job.queue for job in record.jobs] == [name, other, name]
        assert await q.size(other) == 0
        assert (await q.flow_status(result.flow_id)).states == {
            "render": "done",
            "mail": "done",
            "log": "done",
        }

    async def test_child_naming_the_flows_queue_stays_on_it(self, conformance: Conformance) -> None:
        name = conformance.name
        await _flow(
            conformance, [{"name": "a"}, {"name": "b", "depends_on": ["a"], "queue_name": name}]
        )
        assert await conformance.size() == 2
        assert await _run(conformance) == 1
        assert await _run(conformance) == 1

    async def test_flow_status_lists_the_children_of_every_queue(
        self, conformance: Conformance
    ) -> None:
        other = _elsewhere(conformance)
        result = await _flow(
            conformance,
            [
                {"name": "a"},
                {"name": "b", "depends_on": ["a"], "queue_name": other},
                {"name": "c", "queue_name": other},
            ],
        )
        assert await _states(conformance, result) == {"a": "pending", "b": "parked", "c": "pending"}

    async def test_consumer_of_the_other_queue_runs_the_released_child_without_waiting(
        self, conformance: Conformance
    ) -> None:
        q, other = conformance.queue, _elsewhere(conformance)
        record = Recorder()
        # A poll interval far beyond the safety net: only the release's wake-up can deliver.
        async with consuming(q, other, record, poll_interval=3600):
            await _flow(
                conformance,
                [
                    {"name": "a", "payload": "a"},
                    {"name": "b", "payload": "b", "depends_on": ["a"], "queue_name": other},
                ],
            )
            assert await _run(conformance) == 1
            await wait_until(lambda: record.seen == ["b"], "the released child to run")

    async def test_policies_reach_children_on_other_queues(self, conformance: Conformance) -> None:
        conformance.require("flow_policies", "the children cannot follow a dependency's death")
        conformance.require("dlq", "the failed child cannot be looked at")
        q, other = conformance.queue, _elsewhere(conformance)
        result = await _flow(
            conformance,
            [
                FlowChild(name="a", max_attempts=1),
                FlowChild(
                    name="fails", depends_on=["a"], queue_name=other, on_dependency_failure="fail"
                ),
                FlowChild(
                    name="ignores",
                    payload="ignores",
                    depends_on=["a"],
                    queue_name=other,
                    on_dependency_failure="ignore",
                ),
            ],
        )
        await _dies(conformance, "attempts", result.jobs[0].job_id)
        assert await q.dlq_size(other) == 1
        [letter] = await q.dlq_list(other)
        assert letter.job_id == result.jobs[1].job_id
        assert "'a'" in (letter.last_error or "")
        record = Recorder()
        assert (await q.tick(other, record)).leased == 1
        assert record.seen == ["ignores"]


@requires("flows", "enqueue_flow refuses with queue/flow-unsupported first")
@lacking("flow_policies", "covered by TestFlowPolicies")
class TestWithoutFlowPolicies:
    @pytest.mark.parametrize("policy", ["fail", "ignore"])
    async def test_a_policy_other_than_wait_is_flow_unsupported(
        self, conformance: Conformance, policy: str
    ) -> None:
        error = await _refused_storing_nothing(
            conformance,
            "queue/flow-unsupported",
            [{"name": "a"}, {"name": "b", "depends_on": ["a"], "on_dependency_failure": policy}],
        )
        assert "flow_policies" in error.message

    async def test_wait_is_accepted(self, conformance: Conformance) -> None:
        await _flow(
            conformance,
            [{"name": "a"}, {"name": "b", "depends_on": ["a"], "on_dependency_failure": "wait"}],
        )
        assert await conformance.size() == 2


@requires("flows", "enqueue_flow refuses with queue/flow-unsupported first")
@lacking("cross_queue_flows", "covered by TestFlowAcrossQueues")
class TestWithoutCrossQueueFlows:
    async def test_a_child_on_another_queue_is_flow_unsupported(
        self, conformance: Conformance
    ) -> None:
        other = _elsewhere(conformance)
        error = await _refused_storing_nothing(
            conformance,
            "queue/flow-unsupported",
            [{"name": "a"}, {"name": "b", "depends_on": ["a"], "queue_name": other}],
        )
        assert "cross_queue_flows" in error.message
        assert await conformance.queue.size(other) == 0
