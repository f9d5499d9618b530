"""The reliability campaign's sizes (bounded or long form) and its per-scenario reports.

Not a test module.  ``BLAMEQUEUE_RELIABILITY=long`` selects the long form (bigger numbers);
unset (or ``bounded``) gives the bounded form CI runs.  Every scenario files one
:class:`ScenarioReport`: printed as one line at the end of the run and appended, as one JSON
object per line, to ``BLAMEQUEUE_RELIABILITY_REPORT`` (a path) or to
``<pytest basetemp>/reliability-report.jsonl``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest

__all__ = [
    "CALL_FAILED",
    "FORM_VARIABLE",
    "REPORT_VARIABLE",
    "Form",
    "Reports",
    "ScenarioReport",
    "Tally",
    "current_form",
]

FORM_VARIABLE = "BLAMEQUEUE_RELIABILITY"
REPORT_VARIABLE = "BLAMEQUEUE_RELIABILITY_REPORT"
_FORMS = ("bounded", "long")

#: Set on a test item by the reliability conftest: whether the test's call phase failed (a
#: fixture that checks a total at teardown leaves a failed test to its own report).
CALL_FAILED = pytest.StashKey[bool]()

T = TypeVar("T")


@attrs.frozen
class Form:
    """Which form runs: ``bounded`` (CI) or ``long`` (``BLAMEQUEUE_RELIABILITY=long``)."""

    name: str

    @property
    def long(self) -> bool:
        return self.name == "long"

    def pick(self, bounded: T, long: T) -> T:
        return long if self.long else bounded


def current_form(env: dict[str, str] | None = None) -> Form:
    raw = (os.environ if env is None else env).get(FORM_VARIABLE, "").strip().lower()
    name = raw or "bounded"
    if name not in _FORMS:
        raise ValueError(f"{FORM_VARIABLE} must be 'bounded' or 'long', got {raw!r}")
    return Form(name)


@attrs.frozen(kw_only=True)
class ScenarioReport:
    """What one scenario threw and what survived.

    ``enqueued``: jobs acknowledged to the producer; ``completed``: of those, jobs that ended
    done; ``run_more_than_once``: jobs whose handler ran (and recorded) more than once;
    ``lost``: acknowledged jobs that are neither done nor still stored; ``recovery_seconds``:
    how long the queue took to work normally again after the fault (``None`` when the
    scenario has no single fault to recover from).  ``details`` holds what else the scenario
    measured (kills, in-flight jobs at kills, fuzz cases tried...).
    """

    scenario: str
    backend: str
    form: str
    enqueued: int
    completed: int
    run_more_than_once: int
    lost: int
    recovery_seconds: float | None = None
    details: dict[str, Any] = attrs.field(factory=dict)

    def line(self) -> str:
        recovery = "-" if self.recovery_seconds is None else f"{self.recovery_seconds:.2f}s"
        extra = " ".join(f"{key}={_short(value)}" for key, value in self.details.items())
        return (
            f"[reliability] {self.scenario} on {self.backend} ({self.form}): "
            f"enqueued={self.enqueued} completed={self.completed} "
            f"run_more_than_once={self.run_more_than_once} lost={self.lost} "
            f"recovery={recovery}" + (f" {extra}" if extra else "")
        )

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True, default=str)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ",".join(f"{k}:{_short(v)}" for k, v in value.items()) or "{}"
    return str(value)


@attrs.define
class Reports:
    """Collects the reports of one pytest session and appends each to the JSON-lines file."""

    path: Path
    lines: list[str] = attrs.field(factory=list)

    def add(self, report: ScenarioReport) -> None:
        self.lines.append(report.line())
        print(report.line())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(report.to_json() + "\n")


@attrs.define
class _Sum:
    backends: set[str] = attrs.field(factory=set)
    cases: int = 0
    enqueued: int = 0
    completed: int = 0
    run_more_than_once: int = 0
    lost: int = 0
    recovery_seconds: float | None = None
    details: dict[str, Any] = attrs.field(factory=dict)


def _combined(backends: set[str]) -> str:
    """``{"memory/asyncio", "local/trio", ...}`` -> ``"local+memory/asyncio+trio"``."""
    columns: list[set[str]] = []
    for backend in backends:
        for index, part in enumerate(backend.split("/")):
            if len(columns) <= index:
                columns.append(set())
            columns[index].add(part)
    return "/".join("+".join(sorted(column)) for column in columns)


@attrs.define
class Tally:
    """Sums the outcomes of many small cases (one per test) into one report per scenario."""

    reports: Reports
    form: Form
    sums: dict[str, _Sum] = attrs.field(factory=dict)

    def add(
        self,
        scenario: str,
        backend: str,
        *,
        enqueued: int,
        completed: int,
        run_more_than_once: int = 0,
        lost: int = 0,
        recovery_seconds: float | None = None,
        **details: Any,
    ) -> None:
        total = self.sums.setdefault(scenario, _Sum())
        total.backends.add(backend)
        total.cases += 1
        total.enqueued += enqueued
        total.completed += completed
        total.run_more_than_once += run_more_than_once
        total.lost += lost
        if recovery_seconds is not None:
            total.recovery_seconds = max(total.recovery_seconds or 0.0, recovery_seconds)
        for key, value in details.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total.details[key] = total.details.get(key, 0) + value
            else:
                total.details[key] = value

    def flush(self) -> None:
        for scenario, total in self.sums.items():
            self.reports.add(
                ScenarioReport(
                    scenario=scenario,
                    backend=_combined(total.backends),
                    form=self.form.name,
                    enqueued=total.enqueued,
                    completed=total.completed,
                    run_more_than_once=total.run_more_than_once,
                    lost=total.lost,
                    recovery_seconds=total.recovery_seconds,
                    details={"cases": total.cases, **total.details},
                )
            )
        self.sums.clear()
