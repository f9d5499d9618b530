"""Fixtures of the reliability campaign: the form (bounded or long) and the report sink."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_report import CALL_FAILED, REPORT_VARIABLE, Form, Reports, Tally, current_form

_REPORTS_KEY = pytest.StashKey[Reports]()

# The Redis scenarios start their servers with the redis backend's own test helpers
# (tests/redis/redis_helpers.py), which pytest puts on sys.path only when it collects tests/redis.
sys.path.append(str(Path(__file__).parents[1] / "redis"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fuzz_kind(name): the input kind a fuzz test reports its cases under"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.fixture(scope="session")
def reliability_form() -> Form:
    try:
        return current_form()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


@pytest.fixture(scope="session")
def reliability_reports(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Reports:
    chosen = os.environ.get(REPORT_VARIABLE, "").strip()
    path = Path(chosen) if chosen else tmp_path_factory.getbasetemp() / "reliability-report.jsonl"
    reports = Reports(path=path)
    request.config.stash[_REPORTS_KEY] = reports
    return reports


@pytest.fixture(scope="session")
def reliability_tally(reliability_reports: Reports, reliability_form: Form) -> Iterator[Tally]:
    """One report per scenario for scenarios made of many small tests, filed at the end."""
    tally = Tally(reports=reliability_reports, form=reliability_form)
    yield tally
    tally.flush()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    reports = config.stash.get(_REPORTS_KEY, None)
    if reports is None or not reports.lines:
        return
    terminalreporter.section("reliability reports")
    for line in reports.lines:
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(also appended as JSON lines to {reports.path})")
