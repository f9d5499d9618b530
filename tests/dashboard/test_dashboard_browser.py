"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``),
served by ``blamequeue dashboard`` in its own process on asyncio and on trio, opened at the
address it prints (the token in the fragment): the page loads, the counts it shows match the
backend, a DLQ retry clicked in the page moves the job back to pending, a queue whose name holds
``/``, ``%`` and a space is listed, opened and its DLQ purged (and no other queue's), and a page
without the token says so until the token is typed in.  Screenshots go to the test's directory
(and to $BLAMEQUEUE_SCREENSHOTS if set)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from blamequeue import Job, JobContext, Queue

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Beside the one purged: a wrong decoding of its name would reach one of these instead.
ODD, NEIGHBOURS = "a/b%2Fc d", ["a", "b", "a%2Fb", "a/b", "a/b/c d"]

if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    if os.environ.get("CI"):
        pytest.fail(
            "the dashboard's browser tests need Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver): .ci/run installs them",
            pytrace=False,
        )
    pytest.skip("chromium / chromedriver not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


async def _fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError("mail server said no")


async def _report(job: Job, ctx: JobContext) -> str:
    await ctx.log("read 10 rows")
    await ctx.log("Traceback (most recent call last):\n  a long line " + "x" * 400)
    await ctx.progress(40, {"rows": 10})
    return "ok"


def _seed(db: Path) -> None:
    async def go() -> None:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            await queue.enqueue_many("emails", [1, 2, 3])
            await queue.enqueue("emails", 4, max_attempts=1, priority=10)
            await queue.tick("emails", _fail, max=1)  # the priority job dies
            for name in [ODD, *NEIGHBOURS]:
                await queue.enqueue(name, name, max_attempts=1)
                await queue.tick(name, _fail, max=1)
            await queue.enqueue("reports", 1, job_id="report-done")
            await queue.tick("reports", _report, max=1)
            await queue.enqueue("reports", 2, job_id="report-later", delay=3600)

    anyio.run(go)


def _enqueue(db: Path, name: str) -> str:
    async def go() -> str:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            return await queue.enqueue(name, "live")

    return anyio.run(go)


def _counts(db: Path, name: str = "emails") -> tuple[int, int]:
    async def go() -> tuple[int, int]:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            found = [(q.pending, q.dead) for q in await queue.queues() if q.name == name]
            return found[0] if found else (0, 0)  # a queue with no job left is not listed

    return anyio.run(go)


@pytest.fixture(params=["asyncio", "trio"])
def dashboard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The address ``blamequeue dashboard`` printed (its token made up for the run, in the
    fragment) and the database it serves."""
    db = tmp_path / "jobs.db"
    _seed(db)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "BLAMEQUEUE_DASHBOARD_TOKEN"}
    command = [sys.executable, "-m", "blamequeue._cli", "dashboard", "--path", str(db)]
    log_path = tmp_path / "dashboard.log"
    log = log_path.open("wb")
    server = subprocess.Popen(
        [*command, "--port", str(port), "--loop", request.param], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            printed = re.search(r"on (http://\S+#token=\S+)", log_path.read_text())
            if printed:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    pass
            assert server.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.05)
        yield printed.group(1), db
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-background-networking",
                 "--disable-dev-shm-usage", "--window-size=1280,1000"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: webdriver.Chrome, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))
    target = os.environ.get("BLAMEQUEUE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / f"{tmp_path.name}-{name}.png")


def _waiting(driver: webdriver.Chrome) -> WebDriverWait[webdriver.Chrome]:
    """A wait that tries again when the page re-rendered an element between finding and using
    it (it refreshes itself every few seconds)."""
    return WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,))


def _clicked(scope: webdriver.Chrome | WebElement | None, by: str, what: str) -> bool:
    """Find ``what`` in ``scope`` and click it (for a wait: a stale element is tried again)."""
    if scope is None:
        return False
    scope.find_element(by, what).click()
    return True


def _job(db: Path, job_id: str) -> tuple[str, int, bool]:
    """The state, attempts and whether it is due now of the job ``job_id`` as stored."""

    async def go() -> tuple[str, int, bool]:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            info = await queue.job_info(job_id)
            assert info is not None
            due = info.job.available_at.timestamp() <= queue.clock.now()
            return info.state, info.job.attempts, due

    return anyio.run(go)


def _open_job(driver: webdriver.Chrome, job_id: str) -> WebDriverWait[webdriver.Chrome]:
    """Open the queue ``reports`` and in it the job ``job_id``; the wait used."""
    wait = _waiting(driver)
    wait.until(lambda d: _clicked(_queue_row(d, "reports"), By.TAG_NAME, "a"))
    wait.until(lambda d: _clicked(d, By.CSS_SELECTOR, f'#jobs tr[data-job="{job_id}"] a'))
    wait.until(lambda d: d.find_element(By.ID, "job-title").text == f"Job {job_id}")
    return wait


def _cells(driver: webdriver.Chrome, name: str) -> list[str] | None:
    row = _queue_row(driver, name)
    return None if row is None else [td.text for td in row.find_elements(By.TAG_NAME, "td")]


def _queue_row(driver: webdriver.Chrome, name: str) -> WebElement | None:
    for row in driver.find_elements(By.CSS_SELECTOR, "#queues tr[data-queue]"):
        if row.get_attribute("data-queue") == name:
            return row
    return None


def test_counts_match_and_a_dlq_retry_moves_the_job_back(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, db = dashboard
    wait = _waiting(browser)
    browser.get(url)
    cells = wait.until(lambda d: _cells(d, "emails"))
    assert "#token" not in browser.current_url  # the page took it out of the address bar
    pending, dead = _counts(db)
    assert (cells[0], int(cells[1]), int(cells[5])) == ("emails", pending, dead)
    assert (pending, dead) == (3, 1)
    _shot(browser, tmp_path, "overview")
    wait.until(lambda d: _clicked(_queue_row(d, "emails"), By.TAG_NAME, "a"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]"))
    # The last hour as charts: a point a minute, scaled to the one failed attempt.
    wait.until(lambda d: d.find_element(By.ID, "chart-jobs").get_attribute("data-minutes"))
    jobs_chart = browser.find_element(By.ID, "chart-jobs")
    assert jobs_chart.get_attribute("data-minutes") == "60"
    assert jobs_chart.get_attribute("data-top") == "1"
    assert jobs_chart.find_elements(By.CSS_SELECTOR, "polyline.failed")
    assert float(browser.find_element(By.ID, "chart-duration").get_attribute("data-top")) > 0
    # Live events: a job another process enqueues shows up, from the store's event log.
    wait.until(lambda d: d.find_element(By.ID, "live-state").get_attribute("data-state") == "open")
    added = _enqueue(db, "emails")
    row = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#live tr[data-event='job.added']"))
    assert added in row.text
    _shot(browser, tmp_path, "queue")
    Select(browser.find_element(By.ID, "chart-window")).select_by_value("21600")
    wait.until(lambda d: d.find_element(By.ID, "chart-jobs").get_attribute("data-minutes") == "360")
    wait.until(lambda d: _clicked(d, By.CSS_SELECTOR, "#dlq tr[data-job] a"))
    error = wait.until(lambda d: d.find_element(By.ID, "job-last-error").text or None)
    assert error == "RuntimeError: mail server said no"  # its first line only
    wait.until(lambda d: _clicked(d, By.ID, "full-error"))  # the whole text, asked for
    full = wait.until(lambda d: d.find_element(By.ID, "job-error").text or None)
    assert full.startswith("RuntimeError: mail server said no")
    _shot(browser, tmp_path, "job")
    wait.until(lambda d: _clicked(d, By.CSS_SELECTOR, "#dlq button.retry"))
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]"))
    assert "retried" in browser.find_element(By.ID, "feedback-text").text
    assert _counts(db) == (5, 0)  # the dead job is pending again (beside the one added live)
    _shot(browser, tmp_path, "retried")


def test_a_queue_named_with_slash_percent_and_space_is_opened_and_purged_alone(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, db = dashboard
    wait = _waiting(browser)
    browser.get(url)
    for name in [ODD, *NEIGHBOURS]:
        cells = wait.until(lambda d, name=name: _cells(d, name))
        assert cells[0] == name
    wait.until(lambda d: _clicked(_queue_row(d, ODD), By.TAG_NAME, "a"))
    wait.until(lambda d: d.find_element(By.ID, "queue-title").text == f"Queue {ODD}")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]")) == 1)
    jobs = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    assert len(jobs) == 1  # its own job, not a neighbour's
    _shot(browser, tmp_path, "odd-queue")
    wait.until(lambda d: _clicked(d, By.ID, "purge-dlq"))
    alert = wait.until(lambda d: d.switch_to.alert)
    assert ODD in alert.text
    alert.accept()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]"))
    assert _counts(db, ODD) == (0, 0)
    for name in NEIGHBOURS:
        assert _counts(db, name) == (0, 1), name  # every other queue keeps its dead letter
    _shot(browser, tmp_path, "odd-queue-purged")


def test_without_the_token_the_page_asks_for_it(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, _ = dashboard
    bare, token = url.split("#token=")
    wait = _waiting(browser)
    browser.get(bare)
    wait.until(lambda d: "needs its token" in d.find_element(By.ID, "status").text)
    assert not browser.find_elements(By.CSS_SELECTOR, "#queues tr[data-queue]")
    _shot(browser, tmp_path, "no-token")
    browser.find_element(By.ID, "token").send_keys(token, Keys.TAB)
    wait.until(lambda d: _queue_row(d, "emails"))


@pytest.mark.parametrize("dashboard", ["asyncio"], indirect=True)  # one loop each: they are slow
def test_the_job_view_shows_log_and_progress_and_rerun_runs_a_done_job_again(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, db = dashboard
    browser.get(url)
    wait = _open_job(browser, "report-done")
    # Read in one wait: the page redraws the log at each refresh, which stales what was found.
    lines = wait.until(
        lambda d: (
            [
                [td.text for td in r.find_elements(By.TAG_NAME, "td")]
                for r in d.find_elements(By.CSS_SELECTOR, "#job-logs tbody tr")
            ]
            or None
        )
    )
    assert [(attempt, message[:12]) for _, attempt, message in lines] == [
        ("1", "read 10 rows"),
        ("1", "Traceback (m"),
    ]
    assert lines[0][0].endswith(" UTC")
    assert browser.find_element(By.ID, "job-progress").text.startswith('40% {"rows":10}')
    assert browser.find_element(By.ID, "job-state").text == "done"
    # A long line wraps inside the view instead of widening the page.
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= browser.execute_script("return window.innerWidth")
    assert not browser.find_element(By.ID, "promote").is_displayed()
    _shot(browser, tmp_path, "job-view")
    wait.until(lambda d: _clicked(d, By.ID, "rerun"))
    wait.until(lambda d: "runs again" in d.find_element(By.ID, "feedback-text").text)
    assert _job(db, "report-done") == ("pending", 0, True)
    wait.until(lambda d: d.find_element(By.ID, "job-state").text == "pending")
    assert not browser.find_element(By.ID, "rerun").is_displayed()  # it no longer applies


@pytest.mark.parametrize("dashboard", ["trio"], indirect=True)
def test_promote_makes_a_delayed_job_due_and_its_feedback_stays_until_dismissed(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, db = dashboard
    browser.get(url)
    wait = _open_job(browser, "report-later")
    assert _job(db, "report-later") == ("pending", 0, False)
    wait.until(lambda d: _clicked(d, By.ID, "promote"))
    wait.until(lambda d: "promoted" in d.find_element(By.ID, "feedback-text").text)
    assert _job(db, "report-later") == ("pending", 0, True)
    ticks = int(browser.find_element(By.ID, "status").get_attribute("data-ticks") or 0)
    # Two refreshes later (the page refreshes every two seconds) it is still there.
    wait.until(
        lambda d: int(d.find_element(By.ID, "status").get_attribute("data-ticks")) >= ticks + 2
    )
    feedback = browser.find_element(By.ID, "feedback")
    assert feedback.is_displayed()
    assert "promoted" in feedback.text
    assert not browser.find_element(By.ID, "promote").is_displayed()  # due now: nothing to do
    _shot(browser, tmp_path, "promoted")
    browser.find_element(By.ID, "feedback-dismiss").click()
    wait.until(lambda d: not d.find_element(By.ID, "feedback").is_displayed())
    # Cancel asks first; once done, the job reads cancelled and the button is gone.
    wait.until(lambda d: _clicked(d, By.ID, "cancel"))
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "cancelled" in d.find_element(By.ID, "feedback-text").text)
    assert _job(db, "report-later")[0] == "cancelled"
    wait.until(lambda d: d.find_element(By.ID, "job-state").text == "cancelled")
    assert not browser.find_element(By.ID, "cancel").is_displayed()
