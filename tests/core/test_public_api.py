"""The public surface: SPEC §2 names exist, `__all__` lists exactly what is public."""

from __future__ import annotations

import attrs

import blamequeue
from blamequeue import abc

SPEC_NAMES = {
    "Queue",
    "QueueError",
    "Job",
    "JobContext",
    "TickResult",
    "RateLimit",
    "FlowChild",
    "FlowJob",
    "FlowResult",
    "FlowStatus",
    "FlowChildStatus",
    "DeadLetter",
    "BackendStatus",
    "Consumer",
    "AuditEvent",
    "hookimpl",
    "metrics_app",
}


def test_every_specified_name_is_exported() -> None:
    assert SPEC_NAMES <= set(blamequeue.__all__)
    for name in blamequeue.__all__:
        assert hasattr(blamequeue, name), name


def test_all_lists_every_public_name_of_the_package() -> None:
    public = {
        name
        for name, value in vars(blamequeue).items()
        if not name.startswith("_")
        and not isinstance(value, type(blamequeue))
        and name != "annotations"
    }
    assert public == set(blamequeue.__all__) - {"__version__"}


def test_value_types_are_frozen_attrs_with_the_specified_fields() -> None:
    expected = {
        blamequeue.Job: [
            "id",
            "queue",
            "payload",
            "priority",
            "attempts",
            "max_attempts",
            "classification",
            "trace_id",
            "created_at",
            "available_at",
            "last_error",
            "flow_id",
            "task",
            "context",
            "group_key",
        ],
        blamequeue.TickResult: [
            "leased",
            "succeeded",
            "failed",
            "stale",
            "unsettled",
            "moved_to_dlq",
            "may_have_more",
            "queue_depth",
            "deferred",
        ],
        blamequeue.DeadLetter: [
            "job_id",
            "queue",
            "payload",
            "attempts",
            "last_error",
            "trace_id",
            "classification",
            "failed_at",
        ],
        blamequeue.BackendStatus: ["name", "protocol", "breaker_state"],
        blamequeue.FlowChild: [
            "name",
            "payload",
            "depends_on",
            "priority",
            "max_attempts",
            "classification",
            "trace_id",
            "queue_name",
            "on_dependency_failure",
        ],
        blamequeue.FlowJob: ["name", "job_id"],
        blamequeue.FlowResult: ["flow_id", "jobs"],
        blamequeue.FlowStatus: ["flow_id", "children"],
        blamequeue.FlowChildStatus: ["name", "job_id", "state"],
        blamequeue.AuditEvent: [
            "name",
            "time",
            "backend",
            "queue",
            "job_id",
            "trace_id",
            "classification",
            "data",
        ],
    }
    for cls, fields in expected.items():
        assert [f.name for f in attrs.fields(cls)] == fields, cls
        assert cls.__setattr__ is not object.__setattr__  # frozen


def test_the_backend_contract_documents_every_method() -> None:
    for name in abc.__all__:
        if isinstance(getattr(abc, name), type):
            assert getattr(abc, name).__doc__, name
    for name, member in vars(abc.Backend).items():
        if callable(member) and not name.startswith("_"):
            assert member.__doc__, f"Backend.{name} has no docstring: the contract lives there"
