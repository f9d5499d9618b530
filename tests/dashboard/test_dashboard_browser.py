"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``),
served by ``blamequeue dashboard`` in its own process on asyncio and on trio: the page loads,
the counts it shows match the backend, and a DLQ retry clicked in the page moves the job back
to pending.  Screenshots go to the test's directory (and to $BLAMEQUEUE_SCREENSHOTS if set)."""

from __future__ import annotations

import os
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
TOKEN = "browser-token-0123456789"

if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    if os.environ.get("CI"):
        pytest.fail(
            "the dashboard's browser tests need Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver): .ci/run installs them",
            pytrace=False,
        )
    pytest.skip("chromium / chromedriver not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


async def _fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError("mail server said no")


def _seed(db: Path) -> None:
    async def go() -> None:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            await queue.enqueue_many("emails", [1, 2, 3])
            await queue.enqueue("emails", 4, max_attempts=1, priority=10)
            await queue.tick("emails", _fail, max=1)  # the priority job dies

    anyio.run(go)


def _counts(db: Path) -> tuple[int, int]:
    async def go() -> tuple[int, int]:
        async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
            [emails] = await queue.queues()
            return emails.pending, emails.dead

    return anyio.run(go)


@pytest.fixture(params=["asyncio", "trio"])
def dashboard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "jobs.db"
    _seed(db)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "BLAMEQUEUE_DASHBOARD_TOKEN": TOKEN}
    command = [sys.executable, "-m", "blamequeue._cli", "dashboard", "--path", str(db)]
    log = (tmp_path / "dashboard.log").open("wb")
    server = subprocess.Popen(
        [*command, "--port", str(port), "--loop", request.param], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "dashboard.log").read_text()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/", db
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


def test_counts_match_and_a_dlq_retry_moves_the_job_back(
    dashboard: tuple[str, Path], browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url, db = dashboard
    wait = WebDriverWait(browser, 20)
    browser.get(url)
    row = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#queues tr[data-queue=emails]"))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    pending, dead = _counts(db)
    assert (cells[0], int(cells[1]), int(cells[5])) == ("emails", pending, dead)
    assert (pending, dead) == (3, 1)
    _shot(browser, tmp_path, "overview")
    row.find_element(By.TAG_NAME, "a").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]"))
    token = browser.find_element(By.ID, "token")
    token.send_keys(TOKEN, Keys.TAB)  # kept for the page's requests
    _shot(browser, tmp_path, "queue")
    browser.find_element(By.CSS_SELECTOR, "#dlq button.retry").click()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-job]"))
    wait.until(lambda d: "retried" in d.find_element(By.ID, "status").text or
               "updated" in d.find_element(By.ID, "status").text)  # fmt: skip
    assert _counts(db) == (4, 0)  # the dead job is pending again
    _shot(browser, tmp_path, "retried")
