"""Flows (SPEC §3.6): the one place a flow specification is checked and turned into jobs.

A flow is a list of named children; ``depends_on`` names siblings that must be ``done`` before
a child may run.  Everything here is pure: the graph is validated completely (shape, names,
dependencies, cycles, then each child's options and payload) before the queue hands the
resulting jobs to the backend in one atomic ``enqueue``.  Backends only store ``parked`` jobs
and release them (see :class:`blamequeue.abc.Settlement`); they never see a child's name or
the graph as such.

A child's flow name travels in the job's ``meta`` (key :data:`FLOW_NAME_KEY`), so
:meth:`Queue.flow_status <blamequeue.Queue.flow_status>` can report children by name; a flow
spanning several queues (``FlowChild.queue_name``) lists them all in each job's ``meta`` too
(``flow_queues``), so whoever ends one of its jobs wakes the consumers of the queues where a
child may have been released.

``on_dependency_failure`` travels to the backend as :attr:`NewJob.on_dependency_failure`; a
job that has dependants saying ``"fail"`` carries the last error they get should it die
(:attr:`NewJob.dependants_error`, text starting :data:`DEPENDENCY_FAILED`, naming the job and
its id: names and ids only, never a payload or an error text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._codec import DEPENDENCY_FAILED
from ._ids import new_id
from ._job_meta import FLOW_NAME_KEY, FLOW_QUEUES_KEY, JobMeta
from ._models import FlowChild
from ._validation import check_queue_name
from .abc import DEPENDENCY_POLICIES, NewJob
from .errors import BadArgumentError, FlowError

__all__ = [
    "FLOW_NAME_KEY",
    "dependants_error",
    "flow_name",
    "parse_flow",
    "plan_flow",
    "with_flow_name",
]

_CHILD_KEYS = frozenset(field.name for field in attrs.fields(FlowChild))


def _bad(message: str) -> FlowError:
    return FlowError("queue/bad-flow", message)


def _child(index: int, value: Any) -> FlowChild:
    where = f"children[{index}]"
    if isinstance(value, FlowChild):
        child = value
    elif isinstance(value, Mapping):
        unknown = sorted(map(str, set(value) - _CHILD_KEYS))
        if unknown:
            raise _bad(
                f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; a child takes "
                f"only {', '.join(sorted(_CHILD_KEYS))}"
            )
        if "name" not in value:
            raise _bad(f"{where} has no 'name'; every child needs a name unique in its flow")
        child = FlowChild(**value)
    else:
        raise _bad(
            f"{where} must be a FlowChild or a mapping with FlowChild's keys, "
            f"got {type(value).__name__}"
        )
    if not isinstance(child.name, str) or not child.name.strip():
        raise _bad(f"{where}.name must be a non-empty string, got {child.name!r}")
    depends_on = child.depends_on
    if not isinstance(depends_on, list | tuple):
        raise _bad(
            f"{where} ({child.name!r}): depends_on must be a list of sibling names, "
            f"got {type(depends_on).__name__}"
        )
    for dep in depends_on:
        if not isinstance(dep, str) or not dep:
            raise _bad(
                f"{where} ({child.name!r}): depends_on must hold sibling names (non-empty "
                f"strings), got {dep!r}"
            )
    if child.queue_name is not None:
        try:
            check_queue_name(child.queue_name, f"{where} ({child.name!r}): queue_name")
        except BadArgumentError as exc:
            raise _bad(f"{exc.message} (or None for the flow's queue)") from exc
    if child.on_dependency_failure not in DEPENDENCY_POLICIES:
        raise _bad(
            f"{where} ({child.name!r}): on_dependency_failure must be one of "
            f"{', '.join(map(repr, DEPENDENCY_POLICIES))}, got {child.on_dependency_failure!r}"
        )
    # A repeated dependency means nothing more than one; keep the first mention's order.
    return attrs.evolve(child, depends_on=tuple(dict.fromkeys(depends_on)))


def _find_cycle(children: Sequence[FlowChild]) -> list[str] | None:
    """A cycle of ``depends_on`` edges as ``[a, b, ..., a]``, or ``None``.  Deterministic: the
    search starts from children in declaration order."""
    edges = {child.name: child.depends_on for child in children}
    finished: set[str] = set()
    for root in edges:
        if root in finished:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(edges[root])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                left = path.pop()
                on_path.discard(left)
                finished.add(left)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step in finished:
                continue
            path.append(step)
            on_path.add(step)
            stack.append(iter(edges[step]))
    return None


def parse_flow(children: Any) -> list[FlowChild]:
    """Check a flow specification's shape and graph; return its children as ``FlowChild``.

    Raises :class:`~blamequeue.errors.FlowError`: ``queue/bad-flow`` (not a list, a child that
    is not a ``FlowChild`` or a mapping with exactly its keys, an empty, non-string or repeated
    name, a malformed ``depends_on``), ``queue/flow-unknown-dep`` (a dependency that names no
    sibling) or ``queue/flow-cycle`` (a child depending on itself, directly or not).
    """
    if not isinstance(children, list | tuple):
        raise _bad(
            f"children must be a list of FlowChild or mappings, got {type(children).__name__}"
        )
    if not children:
        raise _bad("a flow needs at least one child")
    parsed = [_child(index, value) for index, value in enumerate(children)]
    seen: set[str] = set()
    for index, child in enumerate(parsed):
        if child.name in seen:
            raise _bad(f"children[{index}]: the name {child.name!r} is used twice in this flow")
        seen.add(child.name)
    for child in parsed:
        unknown = [dep for dep in child.depends_on if dep not in seen]
        if unknown:
            raise FlowError(
                "queue/flow-unknown-dep",
                f"child {child.name!r} depends on {', '.join(map(repr, unknown))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not in this flow; known children: "
                f"{', '.join(map(repr, sorted(seen)))}",
            )
    cycle = _find_cycle(parsed)
    if cycle is not None:
        what = (
            f"child {cycle[0]!r} depends on itself"
            if len(cycle) == 2
            else "the children depend on each other in a cycle ("
            + " -> ".join(cycle)
            + ", each depending on the next)"
        )
        raise FlowError("queue/flow-cycle", f"{what}; no child of the cycle could ever run")
    return parsed


def with_flow_name(meta: str | None, name: str, queues: Sequence[str] = ()) -> str:
    """``meta`` (a JSON object or ``None``) with the child's flow name added, and the flow's
    queues when it spans several."""
    value: dict[str, Any] = json.loads(meta) if meta else {}
    value[FLOW_NAME_KEY] = name
    if len(queues) > 1:
        value[FLOW_QUEUES_KEY] = list(queues)
    return json.dumps(value, separators=(",", ":"))


def dependants_error(name: str, job_id: str) -> str:
    """The last error of a child dead-lettered because the job ``job_id`` (flow name
    ``name``) it depends on ended dead or cancelled (``on_dependency_failure="fail"``)."""
    return (
        f"{DEPENDENCY_FAILED}flow job {name!r} ({job_id}) ended dead or cancelled, and this "
        f"job was set to fail with it (on_dependency_failure='fail'); retry that job, then "
        f"this one, from the dead-letter queue"
    )


def flow_name(meta: str | None) -> str | None:
    """The flow name stored by :func:`with_flow_name`, if ``meta`` holds one."""
    return JobMeta.parse(meta).flow_name


@attrs.frozen(kw_only=True)
class FlowPlan:
    """A validated flow, ready for one atomic ``Backend.enqueue``."""

    flow_id: str
    names: list[str]
    """The children's names, in declaration order (``jobs`` has the same order)."""
    jobs: list[NewJob]


def plan_flow(children: Any, build_job: Callable[[FlowChild], NewJob]) -> FlowPlan:
    """Validate ``children`` and build one job per child, in declaration order.

    ``build_job`` makes a plain pending job from a child with the same checks as ``enqueue``
    (priority, max_attempts, classification, trace_id, payload); it raises
    ``queue/bad-argument`` or ``queue/bad-payload``, re-raised here naming the child.  Children
    without dependencies stay pending and due as built; the others are ``parked`` with
    ``depends_on`` holding their siblings' job ids.  All children share one ``flow_id``.
    ``build_job`` puts each job on its child's queue (``queue_name``, else the flow's).
    """
    parsed = parse_flow(children)
    built: list[NewJob] = []
    for index, child in enumerate(parsed):
        try:
            built.append(build_job(child))
        except BadArgumentError as exc:
            raise BadArgumentError(
                exc.code, f"children[{index}] ({child.name!r}): {exc.message}"
            ) from exc
    flow_id = "flow-" + new_id()
    ids = {child.name: job.id for child, job in zip(parsed, built, strict=True)}
    queues = tuple(dict.fromkeys(job.queue for job in built))
    failing = {
        dep for child in parsed if child.on_dependency_failure == "fail" for dep in child.depends_on
    }
    jobs = [
        attrs.evolve(
            job,
            flow_id=flow_id,
            meta=with_flow_name(job.meta, child.name, queues),
            depends_on=tuple(ids[dep] for dep in child.depends_on),
            parked=bool(child.depends_on),
            on_dependency_failure=child.on_dependency_failure,
            dependants_error=dependants_error(child.name, job.id)
            if child.name in failing
            else None,
        )
        for child, job in zip(parsed, built, strict=True)
    ]
    return FlowPlan(flow_id=flow_id, names=[child.name for child in parsed], jobs=jobs)
