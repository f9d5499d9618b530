"""Cron expressions: parsing, and the next time one fires in a time zone.

Five fields (``minute hour day-of-month month day-of-week``) fire at second 0; six fields put
``second`` first and honour it.  Each field takes ``*``, numbers, ranges ``a-b``, steps ``*/n``,
``a-b/n`` and ``a/n``, and comma lists of those; months and week days also take their English
three-letter names (``JAN``, ``MON``); day-of-week 0 and 7 are both Sunday.  Macros:
``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.

As in Vixie cron, when both day fields are restricted a day matches when *either* does
(``0 0 13 * FRI`` fires on every 13th and on every Friday).

Time zones and daylight saving time.  Schedules are evaluated in wall-clock time of their zone,
walking real time forward, so what happens on the two transition days a year is decided, not
accidental:

* a schedule whose hour field is restricted (a fixed time of day, ``30 2 * * *``) fires once a
  day: when the clocks go forward over its time, it fires at the instant of the jump; when they
  go back, only the first of the two occurrences of its time fires;
* a schedule whose hour field is ``*`` (``*/15 * * * *``) follows real time: no fire for wall
  times that do not exist, and both passes through a repeated hour fire.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from .errors import BadArgumentError

__all__ = ["Cron"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# The longest month each month can have (February in a leap year), to refuse day/month pairs
# that never happen (``0 0 30 2 *``) instead of searching for them forever.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_TERM = re.compile(r"^(\*|\w+)(?:-(\w+))?(?:/(\d+))?$")
# A schedule that matches at all matches within a 400-year Gregorian cycle; walking stops well
# before that, after this many steps (each step skips a whole month, day, hour or minute).
_MAX_STEPS = 200_000


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


@attrs.frozen
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0

    def value(self, token: str, expression: str) -> int:
        upper = token.upper()
        if upper in self.names:
            return self.names.index(upper) + self.names_start
        if not token.isdigit():
            raise _bad(
                f"cron {expression!r}: {self.name} field has {token!r}, which is neither a number "
                f"nor a name" + (f" ({', '.join(self.names)})" if self.names else "")
            )
        number = int(token)
        if not self.low <= number <= self.high:
            raise _bad(
                f"cron {expression!r}: {self.name} {number} is out of range {self.low}-{self.high}"
            )
        return number

    def parse(self, text: str, expression: str) -> frozenset[int]:
        values: set[int] = set()
        for term in text.split(","):
            match = _TERM.match(term)
            if match is None:
                raise _bad(
                    f"cron {expression!r}: cannot read {term!r} in the {self.name} field; use "
                    f"'*', a number, a range 'a-b', a step '*/n' or 'a-b/n', or a list 'a,b'"
                )
            start_text, end_text, step_text = match.groups()
            if start_text == "*":
                if end_text is not None:
                    raise _bad(f"cron {expression!r}: '*' cannot start a range ({term!r})")
                start, end = self.low, self.high
            else:
                start = self.value(start_text, expression)
                if end_text is not None:
                    end = self.value(end_text, expression)
                else:
                    end = self.high if step_text is not None else start
            step = int(step_text) if step_text is not None else 1
            if step < 1:
                raise _bad(f"cron {expression!r}: step must be at least 1 in {term!r}")
            if end < start:
                raise _bad(f"cron {expression!r}: range {term!r} runs backwards; write it low-high")
            values.update(range(start, end + 1, step))
        return frozenset(values)


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS, 1)
_WEEKDAY = _Field("day-of-week", 0, 7, _DAYS, 0)


def _zone(tz: str | tzinfo | None) -> tzinfo:
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str) or not tz:
        raise _bad(f"tz must be an IANA time zone name such as 'Europe/Paris', got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise _bad(
            f"unknown time zone {tz!r}; use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from exc


@attrs.frozen(kw_only=True)
class Cron:
    """A parsed cron expression bound to a time zone.  Build it with :meth:`parse`."""

    expression: str
    tz: tzinfo
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """Cron numbering: 0 is Sunday."""
    days_restricted: bool
    weekdays_restricted: bool
    fixed_hours: bool
    """The hour field is not ``*``: the schedule names times of day (see the module notes)."""

    @classmethod
    def parse(cls, expression: str, *, tz: str | tzinfo | None = None) -> Cron:
        """Read ``expression``; ``tz`` is an IANA zone name (default UTC).

        Raises ``queue/bad-argument`` naming the field at fault, and for a schedule that can
        never fire (``0 0 31 4 *``: April has 30 days).
        """
        if not isinstance(expression, str):
            raise _bad(f"a cron expression is a string such as '*/5 * * * *', got {expression!r}")
        zone = _zone(tz)
        text = _MACROS.get(expression.strip().lower(), expression)
        fields = text.split()
        if len(fields) == 5:
            fields.insert(0, "0")
        elif len(fields) != 6:
            raise _bad(
                f"cron {expression!r} has {len(fields)} fields; write 5 (minute hour day month "
                f"weekday), 6 (second first) or a macro such as '@hourly'"
            )
        second, minute, hour, day, month, weekday = fields
        weekdays = frozenset(d % 7 for d in _WEEKDAY.parse(weekday, expression))
        cron = cls(
            expression=expression,
            tz=zone,
            seconds=_SECOND.parse(second, expression),
            minutes=_MINUTE.parse(minute, expression),
            hours=_HOUR.parse(hour, expression),
            days=_DAY.parse(day, expression),
            months=_MONTH.parse(month, expression),
            weekdays=weekdays,
            days_restricted=not day.startswith("*"),
            weekdays_restricted=not weekday.startswith("*"),
            fixed_hours=not hour.startswith("*"),
        )
        if not cron.weekdays_restricted and not any(
            day <= _MONTH_DAYS[month - 1] for month in cron.months for day in cron.days
        ):
            raise _bad(f"cron {expression!r} never fires: no month it names has such a day")
        return cron

    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def _matches_wall(self, wall: datetime) -> bool:
        return (
            self._day_matches(wall.date())
            and wall.hour in self.hours
            and wall.minute in self.minutes
            and wall.second in self.seconds
        )

    def next_after(self, after: datetime) -> datetime:
        """The first fire strictly after ``after`` (an aware datetime), in this cron's zone."""
        if after.tzinfo is None or after.utcoffset() is None:
            raise _bad(f"next_after needs an aware datetime (with a tzinfo), got {after!r}")
        start = int(after.timestamp() // 1) + 1
        return datetime.fromtimestamp(self._next_timestamp(start), self.tz)

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Every fire after ``start`` and at or before ``end``, in order."""
        current = start
        while True:
            current = self.next_after(current)
            if current > end:
                return
            yield current

    def _next_timestamp(self, t: int) -> int:
        """The first fire at or after the POSIX second ``t``."""
        zone = self.tz
        previous_t = t
        previous_offset = datetime.fromtimestamp(t, zone).utcoffset()
        for _ in range(_MAX_STEPS):
            wall = datetime.fromtimestamp(t, zone)
            offset = wall.utcoffset()
            if self.fixed_hours and offset != previous_offset and previous_offset is not None:
                jumped = self._skipped_fire(previous_t, t, previous_offset, wall)
                if jumped is not None:
                    return jumped
            previous_t, previous_offset = t, offset
            if wall.month not in self.months:
                t = max(t + 1, self._local_midnight(_first_of_next_month(wall.date())))
            elif not self._day_matches(wall.date()):
                t = max(t + 1, self._local_midnight(wall.date() + timedelta(days=1)))
            elif wall.hour not in self.hours or (self.fixed_hours and wall.fold == 1):
                # The second pass through a repeated hour counts only for real-time schedules.
                t += 3600 - wall.minute * 60 - wall.second
            elif wall.minute not in self.minutes:
                t += _gap_to_next(self.minutes, wall.minute, 60) * 60 - wall.second
            elif wall.second not in self.seconds:
                t += _gap_to_next(self.seconds, wall.second, 60)
            else:
                return t
        raise _bad(f"cron {self.expression!r} does not fire in the next four centuries")

    def _skipped_fire(
        self, previous_t: int, t: int, before: timedelta, wall: datetime
    ) -> int | None:
        """The instant the clocks jumped, if a wall time this schedule names was skipped.

        Called when the UTC offset changed between the last step (``previous_t``) and ``t``.
        Only a forward jump skips wall times: those from the old offset's reading of the jump
        instant up to the new reading.
        """
        after = wall.utcoffset()
        if after is None or after <= before:
            return None
        # Find the jump instant: the first second at which the new offset holds.
        low, high = previous_t, t
        while high - low > 1:
            middle = (low + high) // 2
            if datetime.fromtimestamp(middle, self.tz).utcoffset() == after:
                high = middle
            else:
                low = middle
        jump = high
        skipped = datetime.fromtimestamp(jump, UTC).replace(tzinfo=None) + before
        end = skipped + (after - before)
        while skipped < end:
            if self._matches_wall(skipped):
                return jump
            skipped += timedelta(seconds=1 if len(self.seconds) < 60 else 60)
        return None

    def _local_midnight(self, day: date) -> int:
        # A midnight that does not exist (a zone that jumps at 00:00) reads, with fold 0, as
        # the instant the clocks jumped: the first moment of that day.
        return int(datetime(day.year, day.month, day.day, tzinfo=self.tz).timestamp())


def _first_of_next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def _gap_to_next(allowed: frozenset[int], current: int, modulus: int) -> int:
    """How far ahead the next allowed value is, or to the top of the cycle if none is left."""
    later = [value for value in allowed if value > current]
    return (min(later) if later else modulus) - current
