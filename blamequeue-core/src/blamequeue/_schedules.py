"""The scheduler: registered tasks dispatched on cron schedules, once per slot however many
processes run the scheduler against one backend (SPEC §9, §11).

**Once per slot.** A scheduler about to fire a slot claims it first: a shared record
``schedule-slot/<name>@<slot>`` written only if absent, holding the id the job will have.  The
process whose claim wins enqueues the job under that id and marks the claim ``enqueued``;
every other process sees the claim and moves on.  If the winner dies between its claim and its
enqueue, the claim stays ``claimed``: any scheduler finding such a claim older than
:data:`CLAIM_GRACE` seconds enqueues the job under the claimed id (a backend refuses a second
job with one id, so the slot still yields one job, never two, never none).

**Missed slots.** When no scheduler ran through several slots (every process down), the latest
missed slot fires once when one comes back, no older one: a catch-up burst of stale runs is
rarely what anyone wants.  Slots older than :data:`MISSED_WINDOW` are not fired at all.

**Overlap** (per schedule): ``"queue"`` enqueues whatever the previous run is doing; ``"skip"``
claims the slot but enqueues nothing while the previous run is still pending or inflight;
``"replace"`` cancels a previous run still pending or inflight, then enqueues.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import attrs

from ._clock import to_datetime
from ._codec import dumps
from ._cron import Cron
from ._ids import new_job_id
from ._records import RecordStore, decode_value
from ._tasks import TaskQueue, to_wire
from .errors import BadArgumentError, QueueError

if TYPE_CHECKING:
    from ._models import JobInfo
    from ._runtime import BackendRuntime
    from ._tasks import PendingDispatch

__all__ = [
    "CLAIM_GRACE",
    "MISSED_WINDOW",
    "Every",
    "Overlap",
    "Schedule",
    "ScheduleStatus",
    "Scheduler",
]

log = logging.getLogger("blamequeue")

Overlap = Literal["skip", "queue", "replace"]
_OVERLAPS: Final = ("skip", "queue", "replace")
_LIVE: Final = ("pending", "inflight", "parked")

CLAIM_GRACE: Final = 30.0
"""Seconds after which a slot claimed but never enqueued is enqueued by another scheduler."""

MISSED_WINDOW: Final = 24 * 3600.0
"""How far back a returning scheduler looks for a missed slot to fire."""

_SLOT_KEPT: Final = 7 * 24 * 3600.0
_SLOT, _STATE = "schedule-slot", "schedule"


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


class Every:
    """Cron expressions for common schedules (all in the schedule's time zone)::

    queue.schedule(Every.minutes(5), "SyncInventory")
    queue.schedule(Every.day_at("13:30"), "SendDigest", tz="Europe/Paris")
    """

    @staticmethod
    def seconds(n: int) -> str:
        """Every ``n`` seconds (``n`` divides 60)."""
        return f"*/{_divisor(n, 60, 'seconds')} * * * * *"

    @staticmethod
    def minute() -> str:
        return "* * * * *"

    @staticmethod
    def minutes(n: int) -> str:
        """Every ``n`` minutes, on the hour's multiples of ``n`` (``n`` divides 60)."""
        return f"*/{_divisor(n, 60, 'minutes')} * * * *"

    @staticmethod
    def hours(n: int, *, at_minute: int = 0) -> str:
        return f"{_in(at_minute, 0, 59, 'at_minute')} */{_divisor(n, 24, 'hours')} * * *"

    @staticmethod
    def hour(*, at_minute: int = 0) -> str:
        return f"{_in(at_minute, 0, 59, 'at_minute')} * * * *"

    @staticmethod
    def day_at(at: str = "00:00") -> str:
        hour, minute = _clock_time(at)
        return f"{minute} {hour} * * *"

    @staticmethod
    def week_on(day: str, at: str = "00:00") -> str:
        """Weekly: ``day`` is ``"mon"`` ... ``"sun"``."""
        names = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
        if not isinstance(day, str) or day.lower()[:3] not in names:
            raise _bad(f"day must be one of {', '.join(names)}, got {day!r}")
        hour, minute = _clock_time(at)
        return f"{minute} {hour} * * {day.lower()[:3]}"

    @staticmethod
    def month_on(day: int = 1, at: str = "00:00") -> str:
        hour, minute = _clock_time(at)
        return f"{minute} {hour} {_in(day, 1, 31, 'day')} * *"


def _divisor(n: Any, whole: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or whole % n:
        raise _bad(f"every N {what}: N must divide {whole} evenly, got {n!r}")
    return n


def _in(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"{what} must be an int from {low} to {high}, got {value!r}")
    return value


def _clock_time(at: Any) -> tuple[int, int]:
    try:
        hour, minute = (int(part) for part in str(at).split(":"))
    except ValueError:
        raise _bad(f"a time of day is written 'HH:MM', got {at!r}") from None
    return _in(hour, 0, 23, "the hour"), _in(minute, 0, 59, "the minute")


@attrs.frozen(kw_only=True)
class Schedule:
    """One declared schedule (:meth:`Queue.schedule`)."""

    name: str
    cron: Cron
    task: str
    payload: Any
    overlap: Overlap
    backend: str | None


@attrs.frozen(kw_only=True)
class ScheduleStatus:
    """A schedule as :meth:`Queue.schedules` reports it, from the backend's records."""

    name: str
    expression: str
    tz: str
    task: str
    overlap: Overlap
    next_run: datetime
    last_run: datetime | None
    """When its last run was enqueued (or skipped), by any process."""
    last_job_id: str | None
    last_outcome: str | None
    """``enqueued``, ``skipped`` (overlap) or ``triggered`` (by hand)."""
    last_job_state: str | None
    """The state of that job now (``None``: not found, e.g. pruned after retention)."""


class ScheduledQueue(TaskQueue, Protocol):
    """What the scheduler needs of its queue (a :class:`Queue`) besides enqueueing: task jobs,
    records, and a look at (or the cancel of) a slot's previous job."""

    def job(self, task: Any, payload: Any = None) -> PendingDispatch: ...
    def _known_runtime(self, backend: str | None) -> BackendRuntime | None: ...
    def records(self, backend: str | None = None) -> RecordStore: ...
    async def job_info(self, job_id: str, *, backend: str | None = None) -> JobInfo | None: ...
    async def cancel(self, job_id: str, *, backend: str | None = None) -> bool: ...


class Scheduler:
    """The schedules of one queue and the loop that fires them."""

    def __init__(self, queue: ScheduledQueue) -> None:
        self._queue = queue
        self._schedules: dict[str, Schedule] = {}
        self._checked: dict[str, float] = {}  # per schedule: up to when slots were looked at

    # -- declaring -------------------------------------------------------------------------
    def add(
        self,
        expression: str,
        task: Any,
        payload: Any,
        *,
        name: str | None,
        tz: str | None,
        overlap: Any,
        backend: str | None,
    ) -> Schedule:
        cron = Cron.parse(expression, tz=tz)
        if overlap not in _OVERLAPS:
            raise _bad(f"overlap must be one of {', '.join(_OVERLAPS)}, got {overlap!r}")
        pending = self._queue.job(task, payload)  # refuses unknown tasks (queue/unknown-job)
        # A payload every firing would be refused for (queue/bad-payload, .../payload-too-large)
        # is refused here, once, instead of in a warning at each slot.
        runtime = self._queue._known_runtime(backend)
        dumps(to_wire(payload), None if runtime is None else runtime.max_payload_bytes)
        task_name = pending.settings.name
        schedule_name = name if name is not None else f"{task_name} {expression}"
        if not isinstance(schedule_name, str) or not schedule_name or "\0" in schedule_name:
            raise _bad(f"a schedule name must be a non-empty string, got {schedule_name!r}")
        if schedule_name in self._schedules:
            raise _bad(
                f"a schedule named {schedule_name!r} is declared already; give each schedule "
                f"its own name= (the name keys its slots in the backend)"
            )
        schedule = Schedule(
            name=schedule_name,
            cron=cron,
            task=task_name,
            payload=payload,
            overlap=overlap,
            backend=backend,
        )
        self._schedules[schedule_name] = schedule
        return schedule

    def get(self, name: str) -> Schedule:
        found = self._schedules.get(name)
        if found is None:
            known = ", ".join(sorted(self._schedules)) or "none"
            raise QueueError(
                "queue/bad-argument", f"no schedule named {name!r} (declared: {known})"
            )
        return found

    @property
    def schedules(self) -> Sequence[Schedule]:
        return list(self._schedules.values())

    # -- running ---------------------------------------------------------------------------
    def _store(self, schedule: Schedule) -> RecordStore:
        return self._queue.records(schedule.backend)

    def _now(self) -> float:
        return self._queue.clock.now()

    async def run(self) -> None:
        """Fire due slots for ever, sleeping on the queue's clock until the next one."""
        while True:
            await self.run_due()
            wait = self.seconds_to_next()
            await self._queue.clock.sleep(min(wait, 60.0))

    def seconds_to_next(self) -> float:
        now = self._now()
        after = datetime.fromtimestamp(now, UTC)
        nexts = [s.cron.next_after(after).timestamp() for s in self._schedules.values()]
        return max(0.0, min(nexts, default=now + 60.0) - now)

    async def run_due(self) -> list[str]:
        """Fire every schedule whose slot came due since it was last looked at (the latest
        missed slot only); returns the ids of the jobs this call enqueued."""
        fired: list[str] = []
        now = self._now()
        for schedule in self._schedules.values():
            since = self._checked.get(schedule.name)
            try:
                if since is None:
                    since = await self._resume_point(schedule, now)
                latest = None
                for slot in schedule.cron.fires_between(
                    datetime.fromtimestamp(since, UTC),
                    datetime.fromtimestamp(now, UTC),
                ):
                    latest = slot.timestamp()
                await self._recover(schedule, now)
                if latest is not None:
                    job_id = await self._fire(schedule, latest, now)
                    if job_id is not None:
                        fired.append(job_id)
                self._checked[schedule.name] = now
            except QueueError as exc:
                # One schedule's backend trouble must not stop the others; its slots are
                # looked at again on the next pass (a claimed slot is never fired twice).
                log.warning("schedule %r could not fire: %s", schedule.name, exc)
        return fired

    async def _resume_point(self, schedule: Schedule, now: float) -> float:
        """Where a process starting up looks for due slots from: the last slot any process
        fired (so one missed while every scheduler was down fires now), not further back
        than MISSED_WINDOW; a schedule that never fired starts from now."""
        state = await self._store(schedule).get_value(_STATE, schedule.name)
        if not isinstance(state, Mapping) or not isinstance(state.get("slot"), int | float):
            return now
        return max(float(state["slot"]), now - MISSED_WINDOW)

    async def _fire(self, schedule: Schedule, slot: float, now: float) -> str | None:
        store = self._store(schedule)
        key = f"{schedule.name}@{slot:.0f}"
        job_id = new_job_id()
        claim = {"job_id": job_id, "state": "claimed", "at": now, "slot": slot}
        if not await store.put(_SLOT, key, claim, expires_at=slot + _SLOT_KEPT, if_absent=True):
            return None  # another process has this slot
        previous = await store.get_value(_STATE, schedule.name)
        if await self._overlaps(schedule, previous):
            await store.put(_SLOT, key, {**claim, "state": "skipped"}, expires_at=slot + _SLOT_KEPT)
            await self._remember(schedule, slot, now, previous_job(previous), "skipped")
            return None
        await self._enqueue(schedule, job_id)
        await store.put(_SLOT, key, {**claim, "state": "enqueued"}, expires_at=slot + _SLOT_KEPT)
        await self._remember(schedule, slot, now, job_id, "enqueued")
        return job_id

    async def _overlaps(self, schedule: Schedule, previous: Any) -> bool:
        last = previous_job(previous)
        if schedule.overlap == "queue" or last is None:
            return False
        info = await self._queue.job_info(last, backend=self._backend_of(schedule))
        if info is None or info.state not in _LIVE:
            return False
        if schedule.overlap == "skip":
            return True
        await self._queue.cancel(last, backend=self._backend_of(schedule))  # replace
        return False

    def _backend_of(self, schedule: Schedule) -> str | None:
        return schedule.backend

    async def _enqueue(self, schedule: Schedule, job_id: str) -> None:
        pending: PendingDispatch = self._queue.job(schedule.task, schedule.payload)
        if schedule.backend is not None:
            pending = pending.on_backend(schedule.backend)
        try:
            await self._queue._dispatch_task({**pending._options(), "job_id": job_id})
        except QueueError as exc:
            if "already exists" not in exc.message:
                raise
            # A recovery racing the original claimer: the job is stored once, which is the goal.

    async def _recover(self, schedule: Schedule, now: float) -> None:
        """Enqueue the job of a slot claimed but never enqueued (its claimer died)."""
        store = self._store(schedule)
        for record in await store.list(_SLOT, prefix=f"{schedule.name}@"):
            claim = decode_value(record)
            if not isinstance(claim, Mapping) or claim.get("state") != "claimed":
                continue
            if now - float(claim["at"]) < CLAIM_GRACE:
                continue
            await self._enqueue(schedule, str(claim["job_id"]))
            await store.put(
                _SLOT, record.key, {**claim, "state": "enqueued"}, expires_at=record.expires_at
            )
            slot = float(claim["slot"])
            await self._remember(schedule, slot, now, str(claim["job_id"]), "enqueued")

    async def _remember(
        self, schedule: Schedule, slot: float, now: float, job_id: str | None, outcome: str
    ) -> None:
        state = {
            "slot": slot,
            "at": now,
            "job_id": job_id,
            "outcome": outcome,
            # Enough for a process that did not declare it (the CLI's dashboard) to show it.
            "expression": schedule.cron.expression,
            "tz": _zone_name(schedule.cron),
            "task": schedule.task,
            "overlap": schedule.overlap,
        }
        await self._store(schedule).put(_STATE, schedule.name, state)

    # -- status and manual runs ------------------------------------------------------------
    async def trigger(self, name: str) -> str:
        schedule = self.get(name)
        self._store(schedule)  # a backend without records refuses before anything is stored
        job_id = new_job_id()
        await self._enqueue(schedule, job_id)
        await self._remember(schedule, self._now(), self._now(), job_id, "triggered")
        return job_id

    async def status(self) -> list[ScheduleStatus]:
        out: list[ScheduleStatus] = []
        now = datetime.fromtimestamp(self._now(), UTC)
        for schedule in self._schedules.values():
            state = await self._store(schedule).get_value(_STATE, schedule.name)
            last_job = previous_job(state)
            job_state = None
            if last_job is not None:
                info = await self._queue.job_info(last_job, backend=schedule.backend)
                job_state = None if info is None else info.state
            out.append(
                ScheduleStatus(
                    name=schedule.name,
                    expression=schedule.cron.expression,
                    tz=_zone_name(schedule.cron),
                    task=schedule.task,
                    overlap=schedule.overlap,
                    next_run=schedule.cron.next_after(now),
                    last_run=None if not state else to_datetime(float(state["at"])),
                    last_job_id=last_job,
                    last_outcome=None if not state else str(state["outcome"]),
                    last_job_state=job_state,
                )
            )
        return out + await self._undeclared(now, {s.name for s in out})

    async def _undeclared(self, now: datetime, declared: set[str]) -> list[ScheduleStatus]:
        """Schedules other processes fired that this one did not declare (read from their
        stored state on the default backend): what a dashboard started from the CLI shows."""
        queue = self._queue
        runtime = queue._runtime(None)
        if not runtime.backend.capabilities.records:
            return []
        out: list[ScheduleStatus] = []
        for record in await queue.records().list(_STATE):
            state = decode_value(record)
            if record.key in declared or not isinstance(state, Mapping):
                continue
            try:
                cron = Cron.parse(str(state["expression"]), tz=state.get("tz"))
            except (KeyError, QueueError):
                continue  # written by an older version: nothing to show
            info = None
            if isinstance(state.get("job_id"), str):
                info = await queue.job_info(state["job_id"])
            out.append(
                ScheduleStatus(
                    name=record.key,
                    expression=cron.expression,
                    tz=_zone_name(cron),
                    task=str(state.get("task")),
                    overlap=state.get("overlap", "queue"),
                    next_run=cron.next_after(now),
                    last_run=to_datetime(float(state["at"])),
                    last_job_id=previous_job(state),
                    last_outcome=str(state["outcome"]),
                    last_job_state=None if info is None else info.state,
                )
            )
        return out


def _zone_name(cron: Cron) -> str:
    return str(getattr(cron.tz, "key", cron.tz))


def previous_job(state: Any) -> str | None:
    if isinstance(state, Mapping) and isinstance(state.get("job_id"), str):
        return str(state["job_id"])
    return None
