"""A job's log (``ctx.log``, SPEC §15) and its last progress (``JobInfo.progress``, SPEC §10),
kept in the shared records (:mod:`._records`), so every backend that keeps records has them
without methods of its own.

What is stored, under the job's *key* ``{job id}/{born}``, ``born`` being the job's
``created_at`` in microseconds (a job enqueued later under the same id starts afresh):

* ``job-log`` ``KEY``: the counter ``lines``, how many lines the job ever wrote.  Each append
  takes its number from it in one atomic ``record_add``, so writers in several tasks or
  processes never share one;
* ``job-log-line`` ``KEY/NNNNNNNNNNNN``: line ``N``, ``{"time", "attempt", "message"}`` sealed
  for the job's ``"log"`` place.  Writing line ``N`` deletes line ``N - 1000``: at most the last
  :data:`MAX_LOG_LINES` are kept, at a constant cost per line, and one ``record_list`` reads
  them in order;
* ``job-progress`` ``KEY``: the last progress event, sealed as it was published.

Retention.  Both are read through their job: once the job is gone (pruned after
``retain_done``, purged), ``Queue.job_logs`` answers ``queue/job-not-found`` and ``job_info``
has nothing to show them on.  The records themselves expire :data:`KEPT_PAST_RETENTION`
after ``retain_done`` past their last write, so the store sheds them without knowing which
jobs were pruned; a job kept longer than that (a dead one waiting for ``dlq_retry``) keeps its
state and error but shows an empty log.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ._clock import to_datetime
from ._codec import dumps, job_place
from ._job_logging import job_extra
from ._models import JobLogLine, JobProgress
from ._progress import open_progress
from ._records import RecordStore, decode_value
from .abc import Record, StoredJob
from .errors import BadArgumentError, QueueError

if TYPE_CHECKING:
    from ._runtime import BackendRuntime

__all__ = [
    "LOG_KIND",
    "LOG_LINE_KIND",
    "MAX_LOG_LINES",
    "MAX_LOG_MESSAGE",
    "PROGRESS_KIND",
    "JobJournal",
    "check_message",
    "last_progress",
    "read_logs",
]

log = logging.getLogger("blamequeue")

MAX_LOG_LINES = 1000
"""A job keeps at most its last this many log lines."""
MAX_LOG_MESSAGE = 4096
"""A longer message is cut to its first this many characters, followed by :data:`_CUT`."""
_CUT = "...[truncated]"
KEPT_PAST_RETENTION = 30 * 86400.0
"""How long past ``retain_done`` after its last write a job's log and progress are kept."""
PROGRESS_STORE_INTERVAL = 1.0
"""A handler may report progress many times a second: the last progress is stored at most
once per this many seconds (the queue's clock) per attempt, and once more when the handler
returns or raises, so what is kept is never staler than this while the job runs."""

#: Record kinds (see the module docstring).
LOG_KIND, LOG_LINE_KIND, PROGRESS_KIND = "job-log", "job-log-line", "job-progress"

# Backends whose missing records were already reported (one warning each per process).
_told: set[str] = set()


def _key(stored: StoredJob) -> str:
    return f"{stored.id}/{round(stored.created_at * 1_000_000)}"


def _log_place(queue: str, job_id: str) -> bytes:
    return job_place("log", queue, job_id)


def check_message(message: Any) -> str:
    """The text a log line keeps of ``message``: a ``str``, cut at :data:`MAX_LOG_MESSAGE`
    characters; anything else is ``queue/bad-argument``."""
    if not isinstance(message, str):
        raise BadArgumentError(
            "queue/bad-argument",
            f"ctx.log(message) takes a str, got {type(message).__name__}: {message!r:.80}; "
            f"format the value first, e.g. ctx.log(f'... {{value!r}}')",
        )
    if len(message) > MAX_LOG_MESSAGE:
        return message[:MAX_LOG_MESSAGE] + _CUT
    return message


class JobJournal:
    """What one attempt of a job writes besides its result: log lines and its last progress.

    Appends of one attempt are serialised (a handler may log from several tasks at once), so
    its lines are stored, and read back, in the order the calls were made.
    """

    def __init__(self, runtime: BackendRuntime, stored: StoredJob) -> None:
        self._runtime = runtime
        self._job_id, self._queue, self._attempt = stored.id, stored.queue, stored.attempts
        self._extra = job_extra(runtime.name, stored)
        self._key = _key(stored)
        # Made on first use: most jobs never log nor report progress.
        self._log_lock: anyio.Lock | None = None
        self._progress_lock: anyio.Lock | None = None
        self._pending: tuple[float, str] | None = None
        self._stored_at = -math.inf

    def _store(self) -> RecordStore | None:
        runtime = self._runtime
        if runtime.backend.capabilities.records:
            return RecordStore(runtime)
        return None

    def _expiry(self, now: float) -> float:
        return now + self._runtime.retain_done + KEPT_PAST_RETENTION

    async def log(self, message: Any) -> None:
        """Append one line (see :meth:`JobContext.log <blamequeue.JobContext.log>`)."""
        text = check_message(message)
        store = self._store()
        if store is None:
            runtime = self._runtime
            if runtime.name not in _told:
                _told.add(runtime.name)
                log.warning(
                    "backend %r (protocol %r) keeps no records, so ctx.log lines of its jobs "
                    "are not kept (this is said once); use a backend whose capabilities include "
                    "records (e.g. 'local', 'redis') to read them with job_logs()",
                    runtime.name,
                    runtime.protocol,
                    extra=self._extra,
                )
            return
        codec = self._runtime.codec
        if self._log_lock is None:
            self._log_lock = anyio.Lock()
        try:
            async with self._log_lock:
                now = store.now()
                expires = self._expiry(now)
                body = {"time": now, "attempt": self._attempt, "message": text}
                sealed = codec.seal_text(dumps(body), _log_place(self._queue, self._job_id))
                record, _ = await store.add(LOG_KIND, self._key, {"lines": 1}, expires_at=expires)
                number = int(record.counters.get("lines", 1))
                await store.put(
                    LOG_LINE_KIND, f"{self._key}/{number:012d}", sealed, expires_at=expires
                )
                if number > MAX_LOG_LINES:
                    await store.delete(LOG_LINE_KIND, f"{self._key}/{number - MAX_LOG_LINES:012d}")
        except BadArgumentError:
            raise
        except QueueError as exc:
            # The store is down, say: the handler's work matters more than its log line.
            log.warning(
                "a log line of job %s was not kept: %s", self._job_id, exc, extra=self._extra
            )

    async def progress(self, event: str, now: float) -> None:
        """Keep ``event`` (sealed, as published) as the job's last progress, at most once per
        :data:`PROGRESS_STORE_INTERVAL`; a newer one reported sooner waits for the next
        report or :meth:`flush`."""
        self._pending = (now, event)
        if now - self._stored_at >= PROGRESS_STORE_INTERVAL:
            await self._store_progress()

    async def flush(self) -> None:
        """Store the last progress not stored yet (the handler has returned or raised)."""
        if self._pending is not None:
            await self._store_progress()

    async def _store_progress(self) -> None:
        store = self._store()
        if store is None:
            self._pending = None
            return
        if self._progress_lock is None:
            self._progress_lock = anyio.Lock()
        async with self._progress_lock:
            pending, self._pending = self._pending, None
            if pending is None:  # a report waiting on the lock was stored by its holder
                return
            at, event = pending
            self._stored_at = at
            try:
                await store.put(PROGRESS_KIND, self._key, event, expires_at=self._expiry(at))
            except QueueError as exc:
                log.warning(
                    "the progress of job %s was not kept: %s", self._job_id, exc, extra=self._extra
                )


async def read_logs(runtime: BackendRuntime, stored: StoredJob) -> list[JobLogLine]:
    """The log of ``stored``, oldest line first (``Queue.job_logs``).  A line that does not
    open (sealed with a key this process lacks) is skipped and logged."""
    key = _key(stored)
    records = await RecordStore(runtime).list(LOG_LINE_KIND, prefix=f"{key}/")
    place = _log_place(stored.queue, stored.id)
    lines: list[JobLogLine] = []
    for record in records[-MAX_LOG_LINES:]:
        try:
            body = json.loads(runtime.codec.open_text(str(decode_value(record)), place))
            lines.append(
                JobLogLine(
                    time=to_datetime(float(body["time"])),
                    attempt=int(body["attempt"]),
                    message=str(body["message"]),
                )
            )
        except (QueueError, KeyError, TypeError, ValueError) as exc:
            log.warning(
                "an unreadable log line of job %s was skipped: %s",
                stored.id,
                exc,
                extra=job_extra(runtime.name, stored),
            )
    return lines


async def last_progress(
    runtime: BackendRuntime, jobs: Sequence[StoredJob]
) -> list[JobProgress | None]:
    """The last progress kept for each of ``jobs`` (``None``: none kept, or a backend without
    records), in one read."""
    if not jobs or not runtime.backend.capabilities.records:
        return [None] * len(jobs)
    records = await RecordStore(runtime).get_many(PROGRESS_KIND, [_key(stored) for stored in jobs])
    return [
        _progress_of(runtime, stored, record) for stored, record in zip(jobs, records, strict=True)
    ]


def _progress_of(
    runtime: BackendRuntime, stored: StoredJob, record: Record | None
) -> JobProgress | None:
    if record is None:
        return None
    try:
        body = open_progress(runtime, str(decode_value(record)), stored.queue, stored.id)
        return JobProgress(
            percent=float(body["percent"]), data=body.get("data"), time=to_datetime(body["at"])
        )
    except (QueueError, KeyError, TypeError, ValueError) as exc:
        log.warning(
            "the unreadable last progress of job %s was skipped: %s",
            stored.id,
            exc,
            extra=job_extra(runtime.name, stored),
        )
        return None
