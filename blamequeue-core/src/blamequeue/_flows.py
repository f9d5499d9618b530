"""Flows (SPEC §3.6): the one place a flow specification is checked and turned into jobs.

A flow is a list of named children; ``depends_on`` names siblings that must be ``done`` before
a child may run.  Everything here is pure: the graph is validated completely (shape, names,
dependencies, cycles, then each child's options and payload) before the queue hands the
resulting jobs to the backend in one atomic ``enqueue``.  Backends only store ``parked`` jobs
and release them (see :class:`blamequeue.abc.Settlement`); they never see a child's name or
the graph as such.

A child's flow name travels in the job's ``meta`` (key :data:`FLOW_NAME_KEY`), so
:meth:`Queue.flow_status <blamequeue.Queue.flow_status>` can report children by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._ids import new_id
from ._job_meta import FLOW_NAME_KEY, JobMeta
from ._models import FlowChild
from .abc import NewJob
from .errors import BadArgumentError, FlowError

__all__ = ["FLOW_NAME_KEY", "flow_name", "parse_flow", "plan_flow", "with_flow_name"]

"""The ``meta`` key holding a child's name within its flow."""

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


def with_flow_name(meta: str | None, name: str) -> str:
    """``meta`` (a JSON object or ``None``) with the child's flow name added."""
    value: dict[str, Any] = json.loads(meta) if meta else {}
    value[FLOW_NAME_KEY] = name
    return json.dumps(value, separators=(",", ":"))


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
    jobs = [
        attrs.evolve(
            job,
            flow_id=flow_id,
            meta=with_flow_name(job.meta, child.name),
            depends_on=tuple(ids[dep] for dep in child.depends_on),
            parked=bool(child.depends_on),
        )
        for child, job in zip(parsed, built, strict=True)
    ]
    return FlowPlan(flow_id=flow_id, names=[child.name for child in parsed], jobs=jobs)
