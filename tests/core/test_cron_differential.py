"""The cron parser against a maintained one (cronsim), on generated expressions and instants.

Thousands of expressions, built from every form both accept (``*``, numbers, names, ranges,
steps, lists, five and six fields), each bound to a zone and asked for its next three fires
after a random instant between 2000 and 2040; both must agree to the second.  Both follow
Vixie/Debian cron's rule for the two day fields (either matches when both are restricted), and
both evaluate schedules in wall-clock time, so on the zones that shift by an hour the
daylight-saving days must agree too.

One place they part, on purpose: in a zone whose clocks move by half an hour (Lord Howe
Island), cronsim steps whole wall-clock hours across the shift and lands half an hour late on
the transition day; the cases below were checked by hand, and the answer here is the right one.
"""

from __future__ import annotations

import random
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError

from blamequeue._cron import Cron
from blamequeue.errors import QueueError

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_CASES = 700  # expressions per zone; three fires each
_FIRST, _LAST = 946_684_800, 2_208_988_800  # 2000-01-01 .. 2040-01-01, UTC


def _term(rng: random.Random, low: int, high: int, names: tuple[str, ...] | None) -> str:
    def value(number: int) -> str:
        if names is not None and rng.random() < 0.3:
            return names[number - low]
        return str(number)

    start = rng.randint(low, high)
    end = rng.randint(start, high)
    step = rng.randint(1, (high - low) // 2 + 1)
    return rng.choice(
        (
            "*",
            f"*/{step}",
            value(start),
            f"{value(start)}-{value(end)}",
            f"{value(start)}-{value(end)}/{step}",
            f"{start}/{step}",
        )
    )


def _field(rng: random.Random, low: int, high: int, names: tuple[str, ...] | None = None) -> str:
    if rng.random() < 0.35:
        return "*"
    return ",".join(_term(rng, low, high, names) for _ in range(rng.randint(1, 3)))


def _expression(rng: random.Random) -> str:
    fields = [
        _field(rng, 0, 59),
        _field(rng, 0, 23),
        _field(rng, 1, 31),
        _field(rng, 1, 12, _MONTHS),
        _field(rng, 0, 7, _DAYS),
    ]
    if rng.random() < 0.2:
        fields.insert(0, _field(rng, 0, 59))
    return " ".join(fields)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_next_fires_agree_with_cronsim(zone: str) -> None:
    rng = random.Random(f"cron differential {zone}")
    tz = ZoneInfo(zone)
    compared = refused = 0
    for _ in range(_CASES):
        expression = _expression(rng)
        start = datetime.fromtimestamp(rng.randint(_FIRST, _LAST), tz)
        try:
            cron = Cron.parse(expression, tz=zone)
        except QueueError:
            # Only a schedule that can never fire is refused here; cronsim must refuse it too.
            with pytest.raises(CronSimError):
                next(iter(CronSim(expression, start)))
            refused += 1
            continue
        theirs = CronSim(expression, start)
        current = start
        for _ in range(3):
            expected = next(theirs)
            current = cron.next_after(current)
            assert current.timestamp() == expected.timestamp(), (expression, zone, start)
            compared += 1
    assert compared > 2 * _CASES
    assert refused < _CASES // 10


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # 2035-04-01: clocks go back at 02:00 to 01:30; every minute of 20:xx starts at 20:00.
        ("* 20 * 4-9 *", "2035-01-18T23:35:35+11:00", "2035-04-01T20:00:00+10:30"),
        # 2034-10-01: clocks go forward at 02:00 to 02:30; 06:00 exists and comes first.
        ("* 6-17 * 10 *", "2034-03-08T01:39:10+11:00", "2034-10-01T06:00:00+11:00"),
    ],
)
def test_half_hour_shift_days_on_lord_howe(expression: str, after: str, expected: str) -> None:
    cron = Cron.parse(expression, tz="Australia/Lord_Howe")
    start = datetime.fromisoformat(after)
    assert cron.next_after(start).isoformat() == expected
