"""Cron expressions: what each form means, and what happens on daylight saving days."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blamequeue._cron import Cron
from blamequeue.errors import QueueError

NEW_YORK = ZoneInfo("America/New_York")
START = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)


def fires(expression: str, count: int, *, start: datetime = START, tz: str = "UTC") -> list[str]:
    cron = Cron.parse(expression, tz=tz)
    out, current = [], start
    for _ in range(count):
        current = cron.next_after(current)
        out.append(current.strftime("%Y-%m-%d %H:%M:%S %Z"))
    return out


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("*/20 * * * *", ["00:20:00", "00:40:00", "01:00:00"]),
        ("5,35 * * * *", ["00:05:00", "00:35:00", "01:05:00"]),
        ("10-12 * * * *", ["00:10:00", "00:11:00", "00:12:00"]),
        ("10-40/15 * * * *", ["00:10:00", "00:25:00", "00:40:00"]),
        ("50/5 * * * *", ["00:50:00", "00:55:00", "01:50:00"]),
        ("*/15 * * * * *", ["00:00:15", "00:00:30", "00:00:45"]),
        ("30 0 12 * * *", ["12:00:30", "12:00:30", "12:00:30"]),
        ("@hourly", ["01:00:00", "02:00:00", "03:00:00"]),
    ],
)
def test_fields_lists_ranges_and_steps(expression: str, expected: list[str]) -> None:
    assert [f[11:19] for f in fires(expression, 3)] == expected


def test_six_fields_honour_seconds() -> None:
    assert fires("*/20 * * * * *", 4) == [
        "2026-01-01 00:00:20 UTC",
        "2026-01-01 00:00:40 UTC",
        "2026-01-01 00:01:00 UTC",
        "2026-01-01 00:01:20 UTC",
    ]


@pytest.mark.parametrize(
    ("macro", "first", "second"),
    [
        ("@yearly", "2027-01-01 00:00:00", "2028-01-01 00:00:00"),
        ("@annually", "2027-01-01 00:00:00", "2028-01-01 00:00:00"),
        ("@monthly", "2026-02-01 00:00:00", "2026-03-01 00:00:00"),
        ("@weekly", "2026-01-04 00:00:00", "2026-01-11 00:00:00"),
        ("@daily", "2026-01-02 00:00:00", "2026-01-03 00:00:00"),
        ("@midnight", "2026-01-02 00:00:00", "2026-01-03 00:00:00"),
    ],
)
def test_macros(macro: str, first: str, second: str) -> None:
    assert [f[:19] for f in fires(macro, 2)] == [first, second]


def test_names_of_months_and_days_and_sunday_as_seven() -> None:
    assert fires("0 9 * FEB MON-FRI", 2) == ["2026-02-02 09:00:00 UTC", "2026-02-03 09:00:00 UTC"]
    assert fires("0 0 * * 7", 1) == fires("0 0 * * SUN", 1) == ["2026-01-04 00:00:00 UTC"]


def test_both_day_fields_restricted_match_either() -> None:
    # 2026-02-13 is a Friday; the 13th of January is a Tuesday, and 2 January a Friday.
    assert fires("0 0 13 * FRI", 3) == [
        "2026-01-02 00:00:00 UTC",
        "2026-01-09 00:00:00 UTC",
        "2026-01-13 00:00:00 UTC",
    ]


def test_leap_day_waits_for_a_leap_year() -> None:
    assert fires("0 0 29 2 *", 2) == ["2028-02-29 00:00:00 UTC", "2032-02-29 00:00:00 UTC"]


def test_next_after_is_strictly_after() -> None:
    cron = Cron.parse("0 * * * *")
    on_the_hour = datetime(2026, 5, 1, 7, 0, tzinfo=UTC)
    assert cron.next_after(on_the_hour) == on_the_hour + timedelta(hours=1)
    assert cron.next_after(on_the_hour - timedelta(microseconds=1)) == on_the_hour


def test_fires_between_lists_each_slot_once() -> None:
    cron = Cron.parse("*/10 * * * *")
    slots = list(cron.fires_between(START, START + timedelta(hours=1)))
    assert len(slots) == 6
    assert slots[-1] == START + timedelta(hours=1)


def test_time_zone_is_honoured() -> None:
    assert fires("0 9 * * *", 1, tz="Europe/Paris") == ["2026-01-01 09:00:00 CET"]
    paris = Cron.parse("0 9 * * *", tz="Europe/Paris").next_after(START)
    assert paris.astimezone(UTC).hour == 8


class TestDaylightSavingTime:
    """New York: 2026-03-08 02:00 EST jumps to 03:00 EDT; 2026-11-01 02:00 EDT back to 01:00."""

    def test_fixed_time_in_the_skipped_hour_fires_at_the_jump(self) -> None:
        start = datetime(2026, 3, 7, 12, 0, tzinfo=NEW_YORK)
        assert fires("30 2 * * *", 3, start=start, tz="America/New_York") == [
            "2026-03-08 03:00:00 EDT",
            "2026-03-09 02:30:00 EDT",
            "2026-03-10 02:30:00 EDT",
        ]

    def test_fixed_time_in_the_repeated_hour_fires_once(self) -> None:
        start = datetime(2026, 10, 31, 12, 0, tzinfo=NEW_YORK)
        assert fires("30 1 * * *", 2, start=start, tz="America/New_York") == [
            "2026-11-01 01:30:00 EDT",
            "2026-11-02 01:30:00 EST",
        ]

    def test_daily_schedule_keeps_its_wall_time_across_the_change(self) -> None:
        start = datetime(2026, 3, 6, 12, 0, tzinfo=NEW_YORK)
        times = fires("0 9 * * *", 4, start=start, tz="America/New_York")
        assert [t[11:19] for t in times] == ["09:00:00"] * 4
        assert [t[-3:] for t in times] == ["EST", "EDT", "EDT", "EDT"]

    def test_real_time_schedule_skips_nothing_and_repeats_nothing_in_real_time(self) -> None:
        cron = Cron.parse("*/30 * * * *", tz="America/New_York")
        day_start = datetime(2026, 11, 1, 0, 0, tzinfo=NEW_YORK).astimezone(UTC)
        slots = list(cron.fires_between(day_start, day_start + timedelta(hours=4)))
        utc = [s.astimezone(UTC) for s in slots]
        # Four real hours, every half hour: the repeated 01:xx hour fires twice, in real time.
        assert len(slots) == 8
        assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(utc))

    def test_real_time_schedule_has_no_fire_for_wall_times_that_do_not_exist(self) -> None:
        cron = Cron.parse("*/30 * * * *", tz="America/New_York")
        day_start = datetime(2026, 3, 8, 0, 0, tzinfo=NEW_YORK).astimezone(UTC)
        slots = list(cron.fires_between(day_start, day_start + timedelta(hours=3)))
        # Three real hours: 02:xx never happens, so the fires go straight from 01:30 to 03:00.
        assert [s.strftime("%H:%M") for s in slots] == [
            "00:30",
            "01:00",
            "01:30",
            "03:00",
            "03:30",
            "04:00",
        ]


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("* * * *", "has 4 fields"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range"),
        ("* * 0 * *", "day-of-month 0 is out of range"),
        ("* * * 13 *", "month 13 is out of range"),
        ("* * * * 8", "day-of-week 8 is out of range"),
        ("* * * FOO *", "neither a number nor a name"),
        ("*/0 * * * *", "step must be at least 1"),
        ("30-10 * * * *", "runs backwards"),
        ("*-5 * * * *", "cannot start a range"),
        ("1,,2 * * * *", "cannot read ''"),
        ("0 0 31 4 *", "never fires"),
        ("0 0 30 2 *", "never fires"),
    ],
)
def test_bad_expressions_are_refused_with_the_field_named(expression: str, fragment: str) -> None:
    with pytest.raises(QueueError) as caught:
        Cron.parse(expression)
    assert caught.value.code == "queue/bad-argument"
    assert fragment in str(caught.value)


def test_bad_time_zone_and_naive_datetime_are_refused() -> None:
    with pytest.raises(QueueError, match="unknown time zone 'Mars/Olympus'"):
        Cron.parse("* * * * *", tz="Mars/Olympus")
    with pytest.raises(QueueError, match="aware datetime"):
        Cron.parse("* * * * *").next_after(datetime(2026, 1, 1))
    with pytest.raises(QueueError, match="is a string"):
        Cron.parse(5)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    minutes=st.sets(st.integers(0, 59), min_size=1, max_size=5),
    hours=st.sets(st.integers(0, 23), min_size=1, max_size=4),
    weekdays=st.sets(st.integers(0, 6), min_size=1, max_size=7),
    offset=st.integers(0, 7 * 24 * 60),
)
def test_next_fire_is_the_first_matching_minute(
    minutes: set[int], hours: set[int], weekdays: set[int], offset: int
) -> None:
    def listed(values: set[int]) -> str:
        return ",".join(map(str, sorted(values)))

    expression = f"{listed(minutes)} {listed(hours)} * * {listed(weekdays)}"
    after = START + timedelta(minutes=offset, seconds=17)
    got = Cron.parse(expression).next_after(after)
    candidate = after.replace(second=0) + timedelta(minutes=1)
    while not (
        candidate.minute in minutes
        and candidate.hour in hours
        and (candidate.weekday() + 1) % 7 in weekdays
    ):
        candidate += timedelta(minutes=1)
    assert got == candidate
