"""The audit of flow children that died with a dependency (``on_dependency_failure="fail"``).

The backend dead-letters them in the same step as their dependency's death (settle, sweep or
cancel) and answers only for the job it was asked about, so the core finds them afterwards:
the jobs of the flow that are ``dead`` since that moment with the dependants' error naming a
job that died in it, down the graph as far as the ``fail`` travelled.  Each gets the
``system.queue.dlq.write`` event every other dead job gets, with the ``dependency`` that
killed it.  Looked up only when a flow job on a backend with flow policies ended, which is
rare; a failed look-up is logged and costs nothing else (the jobs are already dead)."""

from __future__ import annotations

import logging
from typing import Final

from ._backend_values import StoredJob
from ._codec import DEPENDENCY_FAILED
from ._job_seals import last_error_of
from ._runtime import BackendRuntime
from .abc import FlowPolicies
from .errors import QueueError

__all__ = ["DLQ_WRITE_EVENT", "audit_failed_dependants"]

log = logging.getLogger("blamequeue")

DLQ_WRITE_EVENT: Final = "system.queue.dlq.write"

#: Seconds a dependant's recorded death may precede its dependency's end (float rounding in
#: stores that keep times as text); an older death is an earlier one, audited then.
_SAME_STEP: Final = 0.001


async def audit_failed_dependants(runtime: BackendRuntime, ended: StoredJob, at: float) -> None:
    """Audit the children ``ended`` (a flow job that became dead or cancelled at ``at``)
    dead-lettered with it."""
    flow_id = ended.flow_id
    if flow_id is None or not isinstance(runtime.backend, FlowPolicies):
        return
    backend = runtime.backend
    try:
        jobs = await runtime.call("flow_jobs", lambda: backend.flow_jobs(flow_id))
    except QueueError as exc:
        log.warning("could not audit the dependants of job %s that died with it: %s", ended.id, exc)
        return
    died = {ended.id}
    candidates = [
        job
        for job in jobs
        if job.state == "dead"
        and job.depends_on
        and job.finished_at is not None
        and job.finished_at >= at - _SAME_STEP
    ]
    found = True
    while found:  # a dependant's own dependants died in the same step: follow the graph down
        found = False
        for job in list(candidates):
            killer = _killed_by(runtime, job, died)
            if killer is None:
                continue
            candidates.remove(job)
            died.add(job.id)
            found = True
            await runtime.auditor.emit_job(
                DLQ_WRITE_EVENT,
                job,
                backend=runtime.name,
                data={
                    "attempts": job.attempts,
                    "error_type": "dependency-failed",
                    "dependency": killer,
                },
            )


def _killed_by(runtime: BackendRuntime, job: StoredJob, died: set[str]) -> str | None:
    """The job of ``died`` whose death ``job``'s last error names, if any."""
    killers = [dependency for dependency in job.depends_on if dependency in died]
    if not killers:
        return None
    try:
        error = last_error_of(runtime.codec, job)
    except QueueError:  # sealed with a key this process lacks: it cannot say
        return None
    if error is None or not error.startswith(DEPENDENCY_FAILED):
        return None
    return next((killer for killer in killers if f"({killer})" in error), None)
