"""The Lua scripts of the ``redis`` backend: one script per state transition.

A script runs atomically in Redis, so each transition below is atomic on its own, whatever
other processes do, and a batch (of jobs to enqueue, leases to take, settlements to apply) costs
one round trip.  Every per-queue script gets ``KEYS[1]`` = the queue's ``ready`` key (which
routes the call to the right node of a cluster) and ``ARGV[1]`` = the queue's key base; the
queue's other keys, job hashes and flow indexes are built on that base, so every key a script
touches carries the queue's hash tag and lives in its slot.

Times travel as the decimal strings Python wrote (``repr`` of a float: exact round trip) and
are stored verbatim; Lua only *compares* them (``tonumber`` parses the same double), so no
precision is lost.  Rows go back to Python as one ``cjson`` string (one bulk reply to parse,
whatever the batch).

Leasing order (priority desc, then available_at, then enqueue order) lives in the ``ready``
zset: the score is ``-priority`` (an int32, exact in a double) and members with equal scores
sort bytewise, so the member starts with 16 hex digits of ``available_at`` made sortable
(the IEEE-754 bits, sign-flipped) then 16 hex digits of the queue's enqueue counter, then the
job id.  A lifo job (:class:`blamequeue.abc.Lifo`) scores ``-priority - 0.5`` (exact too),
just ahead of the other jobs of its priority, and its member's 32 hex digits are flipped
(each digit ``d`` becomes ``15 - d``), so among the lifo jobs of a priority the one due latest,
then the one enqueued latest, comes first.  Jobs not yet due wait in ``delayed`` (scored by
``available_at``); a lease first promotes the ones that came due, a lifo job back into its
lifo band (its hash keeps ``lifo``, so its retries, releases and DLQ retries stay lifo).

The Lua lives in files of this package, ``lua/<name>.lua``, each opening with its ``KEYS``,
``ARGV`` and reply; :func:`read_lua` reads them once, at import.  This module names the scripts
and assembles them: a per-queue script is ``lua/queue_prelude.lua`` (keys and shared helpers)
then its own file; ``lease`` and ``lease_after_wait`` share ``lua/lease_due.lua`` between the
two, ``enqueue_unique`` runs its own file then ``enqueue``'s, and ``enqueue_absent`` its own
file, then ``enqueue``'s as a function it calls.  The job edits (``promote``, ``change_delay``,
``change_priority``, ``update_payload``, ``rerun``) share ``lua/job_edit.lua`` (the job's
lookup and the reply), ``rerun`` and ``dlq_retry`` share ``lua/revive.lua`` (a finished job
back to pending), and ``settle``, ``sweep`` and ``cancel`` share ``lua/flow_release.lua`` (what
the jobs parked behind a flow job do when it ends done, dead or cancelled).
"""

from __future__ import annotations

import hashlib
import itertools
import string
from importlib import resources
from typing import Final

import attrs

from blamequeue.abc import UNIQUE_HOLDING_STATES

__all__ = [
    "QUEUE_EVENTS_KEPT",
    "QUEUE_EVENTS_PUBLISH",
    "QUEUE_EVENTS_READ",
    "WATCH_MARK",
    "CANCEL",
    "CHANGE_DELAY",
    "CHANGE_PRIORITY",
    "COUNTS",
    "DLQ_LIST",
    "DLQ_PURGE",
    "PRUNE",
    "PROMOTE",
    "DLQ_RETRY",
    "ENQUEUE",
    "ENQUEUE_ABSENT",
    "ENQUEUE_UNIQUE",
    "ENQUEUE_WIDTH",
    "EXTEND",
    "FLOW_JOBS",
    "GET_JOB",
    "LEASE",
    "LEASE_AFTER_WAIT",
    "LIST_JOBS",
    "NEXT_DUE",
    "PURGE",
    "RERUN",
    "ROW_FIELDS",
    "SCRIPTS",
    "SETTLE",
    "SIZE",
    "SWEEP",
    "UPDATE_PAYLOAD",
    "WAIT_MARK",
    "WAKE_TOKENS",
    "WORKER_BEAT",
    "WORKER_GONE",
    "WORKER_LIST",
    "Script",
    "read_lua",
]

#: How many values a job's row takes in ENQUEUE's flat array of rows (after its id and payload).
ENQUEUE_WIDTH: Final = 9

#: The most wake-up tokens a queue's signal list holds (each wakes one idle consumer).
WAKE_TOKENS: Final = 16

#: The fields of a job row as scripts return it, after the id (``ROW`` in :data:`PRELUDE`).
ROW_FIELDS: Final = (
    "state",
    "payload",
    "priority",
    "attempts",
    "max_attempts",
    "created_at",
    "available_at",
    "classification",
    "trace_id",
    "last_error",
    "meta",
    "flow_id",
    "depends_on",
    "finished_at",
    "seq",
    "group_key",
    "result",
    "lifo",
)


@attrs.frozen
class Script:
    """One Lua script: its name (for messages), its source and its SHA1 (for ``EVALSHA``)."""

    name: str
    source: str
    sha: str = attrs.field(init=False)

    @sha.default
    def _sha(self) -> str:
        return hashlib.sha1(self.source.encode("utf-8")).hexdigest()


#: Where the scripts' sources are: files of this package, shipped in its wheel.
_LUA: Final = resources.files("blamequeue_redis") / "lua"


def read_lua(name: str, **values: object) -> str:
    """The text of ``lua/<name>.lua`` as it goes to Redis: the file's leading ``--`` lines (its
    documentation: ``KEYS``, ``ARGV``, what it returns) left out, and each ``${NAME}`` in it
    replaced by ``values[NAME]`` (constants Python shares with the script).  A placeholder
    without a value raises :class:`KeyError`, at import."""
    text = (_LUA / f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    code = "".join(itertools.dropwhile(lambda line: line.startswith("--"), lines))
    return string.Template(code).substitute({key: str(value) for key, value in values.items()})


#: The text every per-queue script starts with: its keys and shared helpers.
PRELUDE: Final = read_lua(
    "queue_prelude",
    ROW_FIELDS=", ".join(f"'{field}'" for field in ROW_FIELDS),
    WAKE_TOKENS=WAKE_TOKENS,
)


def _script(name: str, body: str) -> Script:
    """A per-queue script: :data:`PRELUDE`, then ``body``."""
    return Script(name, PRELUDE + body)


# Each script's KEYS, ARGV and reply are documented at the top of its file, lua/<name>.lua.
_ENQUEUE: Final = read_lua("enqueue", ENQUEUE_WIDTH=ENQUEUE_WIDTH)
_LEASE_DUE: Final = read_lua("lease_due")
_JOB_EDIT: Final = read_lua("job_edit")
_REVIVE: Final = read_lua("revive")
_FLOW_RELEASE: Final = read_lua("flow_release")

ENQUEUE: Final = _script("enqueue", _ENQUEUE)
ENQUEUE_UNIQUE: Final = _script(
    "enqueue_unique",
    read_lua(
        "enqueue_unique",
        UNIQUE_HOLDING_STATES=", ".join(f"{state} = true" for state in UNIQUE_HOLDING_STATES),
    )
    + _ENQUEUE,
)
# enqueue.lua's text as a function's body: its replies (a count, an error) become the
# function's, so enqueue_absent answers its own after it.
ENQUEUE_ABSENT: Final = _script(
    "enqueue_absent",
    read_lua("enqueue_absent", ENQUEUE_WIDTH=ENQUEUE_WIDTH)
    + "local function store_kept()\n"
    + _ENQUEUE
    + "end\nlocal reply = store_kept()\n"
    + "if type(reply) == 'table' then return reply end\n"
    + "return table.concat(flags)\n",
)
LEASE: Final = _script("lease", _LEASE_DUE + read_lua("lease"))
WAIT_MARK: Final = _script("wait_mark", read_lua("wait_mark"))
LEASE_AFTER_WAIT: Final = _script("lease_after_wait", _LEASE_DUE + read_lua("lease_after_wait"))
SETTLE: Final = _script("settle", _FLOW_RELEASE + read_lua("settle"))
EXTEND: Final = _script("extend", read_lua("extend"))
SWEEP: Final = _script("sweep", _FLOW_RELEASE + read_lua("sweep"))
PRUNE: Final = _script("prune", read_lua("prune"))
SIZE: Final = _script("size", read_lua("size"))
NEXT_DUE: Final = _script("next_due", read_lua("next_due"))
PURGE: Final = _script("purge", read_lua("purge"))
DLQ_LIST: Final = _script("dlq_list", read_lua("dlq_list"))
DLQ_RETRY: Final = _script("dlq_retry", _REVIVE + read_lua("dlq_retry"))
DLQ_PURGE: Final = _script("dlq_purge", read_lua("dlq_purge"))
FLOW_JOBS: Final = _script("flow_jobs", read_lua("flow_jobs"))
GET_JOB: Final = _script("get_job", read_lua("get_job"))
LIST_JOBS: Final = _script("list_jobs", read_lua("list_jobs"))
COUNTS: Final = _script("counts", read_lua("counts"))
CANCEL: Final = _script("cancel", _FLOW_RELEASE + read_lua("cancel"))
PROMOTE: Final = _script("promote", _JOB_EDIT + read_lua("promote"))
CHANGE_DELAY: Final = _script("change_delay", _JOB_EDIT + read_lua("change_delay"))
CHANGE_PRIORITY: Final = _script("change_priority", _JOB_EDIT + read_lua("change_priority"))
UPDATE_PAYLOAD: Final = _script("update_payload", _JOB_EDIT + read_lua("update_payload"))
RERUN: Final = _script("rerun", _JOB_EDIT + _REVIVE + read_lua("rerun"))
#: Events each queue's log keeps for Queue.watch (about: the stream is trimmed with ``~``).
QUEUE_EVENTS_KEPT: Final = 10_000
QUEUE_EVENTS_PUBLISH: Final = _script(
    "queue_events_publish", read_lua("queue_events_publish", QUEUE_EVENTS_KEPT=QUEUE_EVENTS_KEPT)
)
QUEUE_EVENTS_READ: Final = _script("queue_events_read", read_lua("queue_events_read"))
WATCH_MARK: Final = _script("watch_mark", read_lua("watch_mark"))

# The worker registry's scripts are not per-queue: no prelude.
WORKER_BEAT: Final = Script("worker_beat", read_lua("worker_beat"))
WORKER_GONE: Final = Script("worker_gone", read_lua("worker_gone"))
WORKER_LIST: Final = Script("worker_list", read_lua("worker_list"))

SCRIPTS: Final = (
    CANCEL,
    ENQUEUE,
    LEASE,
    WAIT_MARK,
    LEASE_AFTER_WAIT,
    SETTLE,
    EXTEND,
    SWEEP,
    PRUNE,
    SIZE,
    NEXT_DUE,
    PURGE,
    DLQ_LIST,
    DLQ_RETRY,
    DLQ_PURGE,
    FLOW_JOBS,
    GET_JOB,
    LIST_JOBS,
    COUNTS,
    WORKER_BEAT,
    WORKER_GONE,
    WORKER_LIST,
    ENQUEUE_UNIQUE,
    ENQUEUE_ABSENT,
    PROMOTE,
    CHANGE_DELAY,
    CHANGE_PRIORITY,
    UPDATE_PAYLOAD,
    RERUN,
    QUEUE_EVENTS_PUBLISH,
    QUEUE_EVENTS_READ,
    WATCH_MARK,
)
