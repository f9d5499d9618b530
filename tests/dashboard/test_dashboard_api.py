"""The dashboard's HTTP API, served for real (hypercorn on a loopback port, asyncio and trio)
over the local backend: only loopback or allowed ``Host`` names are answered, reads need the
token unless opened on loopback, writes need the token and pass the CSRF guard, counts match the
backend, and nothing secret is shown (payloads, tracebacks, context values, URL passwords).
Queue names with ``/``, ``%``, spaces and more reach exactly their queue."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
import redis

from asgi_server import serving
from blamequeue import FlowChild, Job, JobContext, JsonlAuditSink, Queue, QueueError, dashboard_app
from blamequeue._dashboard import host_name
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

TOKEN = "dashboard-token-0123456789"
READ = {"Authorization": f"Bearer {TOKEN}"}
ACTION = {**READ, "X-Blamequeue-Action": "1"}
ODD_NAMES = ["a/b%2Fc d", "a", "b", "a%2Fb", "q?x=1#frag", "naïve 队列", "100%"]


async def _fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError(f"broken {job.payload['n']}")


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[Queue]:
    queue = Queue(
        backends={"l": {"protocol": "local", "path": str(tmp_path / "jobs.db")}},
        audit_sinks=[JsonlAuditSink(tmp_path / "audit.jsonl")],
    )
    async with queue:
        await queue.enqueue_many("emails", [{"n": n, "secret": "s3cr3t"} for n in range(3)])
        await queue.enqueue_many("emails", [{"n": 9, "secret": "s3cr3t"}], max_attempts=1)
        await queue.tick("emails", _fail, max=10)  # all four fail; one is dead
        await queue.enqueue_flow(
            "flows",
            [
                FlowChild(name="fetch", payload=1),
                FlowChild(name="parse", payload=2, depends_on=["fetch"]),
            ],
        )
        yield queue


def _path(*segments: str) -> str:
    """``/api/...`` with each segment percent-encoded as the page's encodeURIComponent does."""
    return "/api/" + "/".join(quote(s, safe="") for s in segments)


async def test_overview_jobs_and_hidden_payloads(
    seeded: Queue, anyio_backend: str, tmp_path: Path
) -> None:
    audit = str(tmp_path / "audit.jsonl")
    app = dashboard_app(seeded, token=TOKEN, allow_payloads=True, audit_file=audit)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/")  # the page itself holds no data: no token needed
        assert page.status_code == 200
        assert "blamequeue dashboard" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        overview = (await client.get("/api/overview", headers=READ)).json()
        counts = {q["name"]: q for q in overview["queues"]}
        backend = {q.name: q for q in await seeded.queues()}
        assert counts["emails"]["pending"] == backend["emails"].pending == 3
        assert counts["emails"]["dead"] == backend["emails"].dead == 1
        assert len(counts["emails"]["throughput"]) == 60
        assert overview["writable"] is True
        jobs = await client.get("/api/queues/emails/jobs", params={"state": "dead"}, headers=READ)
        [dead] = jobs.json()["jobs"]
        assert dead["job"]["payload"] is None  # never in lists
        job_id = dead["job"]["id"]
        shown = (await client.get(f"/api/jobs/{job_id}", headers=READ)).json()
        assert shown["job"]["payload"] == {"n": 9, "secret": "s3cr3t"}
        assert shown["job"]["last_error"].startswith("RuntimeError: broken 9")
        what = [entry["what"] for entry in shown["timeline"]]
        assert what[:2] == ["enqueued", "due"]
        assert "system.queue.dlq.write" in what  # from the audit file
        assert what[-1] in ("dead", "system.queue.dlq.write")
        assert (await client.get("/api/jobs/job-nope", headers=READ)).status_code == 404
        flows = (await client.get("/api/queues/flows/jobs", headers=READ)).json()
        flow_id = flows["jobs"][0]["job"]["flow_id"]
        flow = (await client.get(f"/api/flows/{flow_id}", headers=READ)).json()
        states = {c["name"]: (c["state"], len(c["depends_on"])) for c in flow["children"]}
        assert states == {"fetch": ("pending", 0), "parse": ("parked", 1)}


async def test_payloads_never_shown_unless_allowed(seeded: Queue, anyio_backend: str) -> None:
    app = dashboard_app(seeded, token=TOKEN)  # allow_payloads off
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        [dead] = (await client.get("/api/queues/emails/dlq", headers=READ)).json()["dead"]
        detail = (await client.get(f"/api/jobs/{dead['job_id']}", headers=ACTION)).json()
        assert detail["job"]["payload"] is None
        assert dead["payload"] is None


async def test_reads_without_the_token_get_401(seeded: Queue, anyio_backend: str) -> None:
    app = dashboard_app(seeded, token=TOKEN)
    [dead] = await seeded.dlq_list("emails")
    reads = [
        "/api/overview",
        "/api/queues/emails/jobs",
        "/api/queues/emails/dlq",
        f"/api/jobs/{dead.job_id}",
        f"/api/jobs/{dead.job_id}/logs",
        "/api/batches",
        "/api/schedules",
        "/api/flows/flow-x",
    ]
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        for path in reads:
            for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}):
                answer = await client.get(path, headers=headers)
                assert answer.status_code == 401, path
                assert answer.headers["www-authenticate"].startswith("Bearer")
                assert "emails" not in answer.text
            assert (await client.get(path, headers=READ)).status_code in (200, 404, 501)


async def test_read_only_open_reads_without_the_token_but_writes_need_it(
    seeded: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(seeded, token=TOKEN, read_only_open=True)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/api/overview")).status_code == 200
        [dead] = (await client.get("/api/queues/emails/dlq")).json()["dead"]
        assert "Traceback" not in str(dead["last_error"])
        full = await client.get(f"/api/jobs/{dead['job_id']}", params={"full": "1"})
        assert full.status_code == 401  # the full error text needs the token even so
        retry = f"/api/jobs/{dead['job_id']}/retry"
        no_token = {"X-Blamequeue-Action": "1"}
        assert (await client.post(retry, headers=no_token)).status_code == 401
        assert await seeded.dlq_size("emails") == 1
        assert (await client.post(retry, headers=ACTION)).json() == {"retried": True}
    open_only = dashboard_app(seeded, read_only_open=True)  # no token: read-only
    async with serving(open_only, anyio_backend) as url, httpx.AsyncClient(base_url=url) as c:
        assert (await c.get("/api/overview")).json()["writable"] is False
        refused = await c.post("/api/queues/emails/dlq/retry-all", headers=ACTION)
        assert refused.status_code == 403
        assert "read-only" in refused.json()["error"]


async def test_retry_all_puts_every_dead_job_of_the_named_queue_back(
    seeded: Queue, anyio_backend: str
) -> None:
    for n in range(3):  # three more dead jobs, four in all
        await seeded.enqueue("emails", {"n": 10 + n}, max_attempts=1, priority=5)
    await seeded.tick("emails", _fail, max=3)
    assert await seeded.dlq_size("emails") == 4
    app = dashboard_app(seeded, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        path = "/api/queues/emails/dlq/retry-all"
        unnamed = await client.post(path, headers=ACTION, json={"queue": "flows"})
        assert unnamed.status_code == 400  # the body must name the queue the path names
        assert await seeded.dlq_size("emails") == 4
        done = await client.post(path, headers=ACTION, json={"queue": "emails"})
        assert done.json() == {"queue": "emails", "retried": 4}
    assert await seeded.dlq_size("emails") == 0


async def test_read_only_open_is_only_for_loopback_clients_and_hosts(seeded: Queue) -> None:
    app = dashboard_app(seeded, token=TOKEN, read_only_open=True, allowed_hosts=["dash.example"])
    assert (await _call(app, "/api/overview", client=("10.1.2.3", 5555)))[0] == 401
    assert (await _call(app, "/api/overview", host="dash.example"))[0] == 401
    assert (await _call(app, "/api/overview", host="dash.example", headers=READ))[0] == 200
    assert (await _call(app, "/api/overview", client=("127.0.0.1", 5555)))[0] == 200
    assert (await _call(app, "/api/overview", client=("::1", 5555)))[0] == 200


async def test_write_actions_need_the_token_and_the_csrf_header(
    seeded: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(seeded, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        [dead] = (await client.get("/api/queues/emails/dlq", headers=READ)).json()["dead"]
        retry = f"/api/jobs/{dead['job_id']}/retry"
        cases: list[tuple[dict[str, Any], int]] = [
            ({}, 401),
            ({"Authorization": "Bearer wrong-token-wrong-token"}, 401),
            (READ, 403),  # no CSRF header
            ({**ACTION, "Origin": "http://evil.example"}, 403),
        ]
        for headers, status in cases:
            assert (await client.post(retry, headers=headers)).status_code == status
        assert await seeded.dlq_size("emails") == 1  # nothing happened
        assert (await client.post(retry, headers=ACTION)).json() == {"retried": True}
        assert await seeded.dlq_size("emails") == 0
        await seeded.tick("emails", _fail, max=10)
        purge = "/api/queues/emails/dlq/purge"
        assert (await client.post(purge, headers=ACTION)).status_code == 400  # names no queue
        wrong = await client.post(purge, headers=ACTION, json={"queue": "other"})
        assert wrong.status_code == 400
        assert "nothing was done" in wrong.json()["error"]
        assert await seeded.dlq_size("emails") >= 1
        done = (await client.post(purge, headers=ACTION, json={"queue": "emails"})).json()
        assert done["queue"] == "emails"
        assert done["purged"] >= 1
        assert (await client.delete("/api/overview", headers=READ)).status_code == 405


async def test_only_loopback_and_allowed_hosts_are_answered(
    seeded: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(seeded, token=TOKEN, allowed_hosts=["Dash.Example.:9000"])
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        for host in ("evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "dash.exam"):
            for path in ("/", "/api/overview"):
                answer = await client.get(path, headers={**READ, "Host": host})
                assert answer.status_code == 421, (host, path)
                assert answer.headers["content-type"].startswith("text/plain")
                assert "DNS rebinding" in answer.text
                assert "emails" not in answer.text
        for host in ("localhost", "localhost:8765", "127.0.0.2", "[::1]:80", "dash.example"):
            answer = await client.get("/api/overview", headers={**READ, "Host": host})
            assert answer.status_code == 200, host
        # A request with no Host at all (HTTP/1.0 allows it) is refused too.
        port = int(url.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /api/overview HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n"
                              % TOKEN.encode())  # fmt: skip
            reply = b""
            with anyio.fail_after(10):
                try:
                    while True:
                        reply += await stream.receive()
                except anyio.EndOfStream:
                    pass
        assert reply.split(b"\r\n", 1)[0].split()[1] == b"421"


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost", "localhost"),
        ("LOCALHOST.:8765", "localhost"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[0:0::1]:8765", "::1"),
        ("[::1", None),
        ("::1", None),  # IPv6 needs its brackets in a Host header
        ("example.com:", None),
        ("example.com:80x", None),
        ("exa mple.com", None),
        ("ex_ample.com", None),
        ("bücher.example", None),
        ("", None),
    ],
)
def test_host_names_are_parsed_strictly(header: str, name: str | None) -> None:
    assert host_name(header) == name


async def test_hosts_given_twice_or_missing_are_refused(seeded: Queue) -> None:
    app = dashboard_app(seeded, token=TOKEN)
    assert (await _call(app, "/api/overview", host=None, headers=READ))[0] == 421
    twice = [(b"host", b"localhost"), (b"host", b"evil.example")]
    assert (await _call(app, "/api/overview", raw_headers=twice, headers=READ))[0] == 421


async def test_no_traceback_context_value_or_url_password_is_shown(
    seeded: Queue, anyio_backend: str
) -> None:
    @seeded.task(queue="reports", tries=1)
    async def build_report(payload: Any, ctx: JobContext) -> None:
        raise ConnectionError("cannot reach redis://:hunter2@cache.internal:6379/0")

    pending = seeded.job(build_report, {"n": 1})
    await pending.with_context(api_key="ctx-s3cret-value", user="u-1").dispatch()
    await seeded.tick("reports", seeded.tasks, max=1)
    [info] = (await seeded.list_jobs("reports")).jobs
    app = dashboard_app(seeded, token=TOKEN, read_only_open=True)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        listed = (await client.get("/api/queues/reports/jobs")).text
        detail = await client.get(f"/api/jobs/{info.job.id}")
        [dead] = (await client.get("/api/queues/emails/dlq")).json()["dead"]
        emails_detail = (await client.get(f"/api/jobs/{dead['job_id']}")).json()
        full = (await client.get(f"/api/jobs/{dead['job_id']}?full=1", headers=READ)).json()
    for shown in (listed, detail.text):
        assert "ctx-s3cret-value" not in shown
        assert "hunter2" not in shown
        assert "Traceback" not in shown
    job = detail.json()["job"]
    assert job["context_keys"] == ["api_key", "user"]
    assert "context" not in job
    assert job["last_error"] == "ConnectionError: cannot reach redis://***@cache.internal:6379/0"
    assert "\n" not in emails_detail["job"]["last_error"]
    assert emails_detail["job"]["last_error"].startswith("RuntimeError: broken 9")
    stored = (await seeded.job_info(dead["job_id"])).job.last_error  # type: ignore[union-attr]
    assert full["job"]["last_error"] == stored  # the whole text, when asked with the token
    assert "in _fail" in stored  # trimmed to the user's code
    assert "_execution.py" not in stored


async def test_queue_names_with_any_character_reach_exactly_their_queue(
    seeded: Queue, anyio_backend: str
) -> None:
    for name in ODD_NAMES:
        await seeded.enqueue(name, {"n": 0, "queue": name}, max_attempts=1)
        await seeded.enqueue(name, {"n": 1, "queue": name})
        await seeded.tick(name, _fail, max=1)  # the first one dies
        assert await seeded.dlq_size(name) == 1
    app = dashboard_app(seeded, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        listed = {
            q["name"] for q in (await client.get("/api/overview", headers=READ)).json()["queues"]
        }
        assert set(ODD_NAMES) <= listed
        for name in ODD_NAMES:
            jobs = (await client.get(_path("queues", name, "jobs"), headers=READ)).json()["jobs"]
            assert {info["job"]["queue"] for info in jobs} == {name}
            dlq = (await client.get(_path("queues", name, "dlq"), headers=READ)).json()
            assert dlq["queue"] == name
            assert [d["queue"] for d in dlq["dead"]] == [name]
        target = "a/b%2Fc d"
        purge = await client.post(
            _path("queues", target, "dlq", "purge"), headers=ACTION, json={"queue": target}
        )
        assert purge.json() == {"queue": target, "purged": 1}
    sizes = {name: await seeded.dlq_size(name) for name in ODD_NAMES}
    assert sizes == {name: 0 if name == target else 1 for name in ODD_NAMES}


async def test_bad_settings_are_refused(seeded: Queue) -> None:
    bad: list[dict[str, Any]] = [
        {"token": "short"},
        {"token": "has a space in it, sixteen+"},
        {"token": "n\u00f6n-ascii-token-0123456789"},
        {},  # no token and not read_only_open: nothing could read it
        {"token": TOKEN, "allowed_hosts": "dash.example"},  # a string, not a list
        {"token": TOKEN, "allowed_hosts": ["http://dash.example/"]},
        {"token": TOKEN, "allowed_hosts": [""]},
    ]
    for settings in bad:
        with pytest.raises(QueueError) as caught:
            dashboard_app(seeded, **settings)
        assert caught.value.code == "queue/invalid-config", settings


async def _call(
    app: Any,
    path: str,
    *,
    host: str | None = "127.0.0.1:8765",
    headers: dict[str, str] | None = None,
    raw_headers: list[tuple[bytes, bytes]] | None = None,
    client: tuple[str, int] | None = ("127.0.0.1", 40000),
) -> tuple[int, bytes]:
    """One request straight to the ASGI app (for what a real client cannot send)."""
    pairs = list(raw_headers or [])
    if host is not None and raw_headers is None:
        pairs.append((b"host", host.encode()))
    pairs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": pairs,
        "client": client,
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"]


async def _report(job: Job, ctx: JobContext) -> dict[str, int]:
    await ctx.log("read 10 rows from https://user:pa55word@files.example/in.csv")
    await ctx.log("wrote the report")
    await ctx.progress(50, {"rows": 10, "_step": "b"})
    return {"sum": 3, "_id": "r-1"}


@pytest.fixture
async def controlled(tmp_path: Path) -> AsyncIterator[Queue]:
    """A local queue holding, in the queue ``reports``: a done job that logged two lines,
    reported progress and returned a result, a delayed job (due in an hour) and a due one."""
    queue = Queue(backends={"l": {"protocol": "local", "path": str(tmp_path / "jobs.db")}})
    async with queue:
        await queue.enqueue("reports", {"n": 1, "_id": "p-1"}, job_id="report-done")
        await queue.tick("reports", _report, max=1)
        await queue.enqueue("reports", {"n": 2}, job_id="report-later", delay=3600)
        await queue.enqueue("reports", {"n": 3}, job_id="report-due")
        yield queue


async def test_job_view_shows_logs_progress_result_and_what_applies(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN, allow_payloads=True)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        done = (await client.get("/api/jobs/report-done", headers=READ)).json()
        assert done["state"] == "done"
        assert done["progress"]["percent"] == 50
        assert done["progress"]["data"] == {"rows": 10, "_step": "b"}  # every key kept
        assert done["job"]["payload"] == {"n": 1, "_id": "p-1"}
        assert done["result_shown"] is True
        assert done["result"] == {"sum": 3, "_id": "r-1"}
        assert done["actions"] == {"promote": False, "rerun": True, "cancel": False}
        logs = (await client.get("/api/jobs/report-done/logs", headers=READ)).json()
        assert logs["job_id"] == "report-done"
        messages = [(line["attempt"], line["message"]) for line in logs["logs"]]
        assert messages == [
            (1, "read 10 rows from https://***@files.example/in.csv"),  # the password masked
            (1, "wrote the report"),
        ]
        assert all(line["time"].endswith("+00:00") for line in logs["logs"])
        later = (await client.get("/api/jobs/report-later", headers=READ)).json()
        assert later["actions"] == {"promote": True, "rerun": False, "cancel": True}
        assert later["result_shown"] is False
        assert later["progress"] is None
        due = (await client.get("/api/jobs/report-due", headers=READ)).json()
        assert due["actions"] == {"promote": False, "rerun": False, "cancel": True}
        assert (await client.get("/api/jobs/report-due/logs", headers=READ)).json()["logs"] == []
        missing = await client.get("/api/jobs/job-nope/logs", headers=READ)
        assert missing.status_code == 404
        assert missing.json()["code"] == "queue/job-not-found"
    hidden = dashboard_app(controlled, token=TOKEN)  # results are shown as payloads are
    async with serving(hidden, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        done = (await client.get("/api/jobs/report-done", headers=READ)).json()
        assert (done["result_shown"], done["result"]) == (False, None)


async def test_promote_makes_a_delayed_job_due_and_says_when_it_cannot(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        done = await client.post("/api/jobs/report-later/promote", headers=ACTION)
        assert done.status_code == 200
        assert done.json() == {"job_id": "report-later", "promoted": True}
        info = await controlled.job_info("report-later")
        assert info is not None
        assert info.job.available_at.timestamp() <= controlled.clock.now()
        for job_id, state in [
            ("report-later", "pending and already due"),  # promoted already
            ("report-due", "pending and already due"),
            ("report-done", "done"),
        ]:
            again = await client.post(f"/api/jobs/{job_id}/promote", headers=ACTION)
            assert again.status_code == 409, job_id
            error = again.json()["error"]
            assert f"it is {state}" in error
            assert "only a delayed pending job" in error
            assert "nothing was done" in error
        missing = await client.post("/api/jobs/job-nope/promote", headers=ACTION)
        assert missing.status_code == 404
        assert missing.json()["code"] == "queue/job-not-found"


async def test_queue_metrics_feed_the_charts_without_error_texts(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        hour = (await client.get("/api/queues/reports/metrics", headers=READ)).json()
        assert len(hour["minutes"]) == 60
        assert sum(minute["succeeded"] for minute in hour["minutes"]) == 1  # report-done
        assert any(minute["average_duration"] is not None for minute in hour["minutes"])
        assert "recent_errors" not in hour
        day = (await client.get("/api/queues/reports/metrics?window=86400", headers=READ)).json()
        assert len(day["minutes"]) == 1440
        odd = await client.get("/api/queues/reports/metrics?window=5", headers=READ)
        assert odd.status_code == 400
        assert "window must be one of 3600, 21600, 86400" in odd.json()["error"]


async def test_a_queues_events_stream_as_json_lines_while_the_page_reads(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN, read_only_open=True)
    async with serving(app, anyio_backend) as url:
        # A raw HTTP/1.1 exchange: the answer never ends by itself, and the test reads a part.
        port = int(url.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            request = "GET /api/queues/reports/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            await stream.send(request.encode())
            received = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in received:
                    received += await stream.receive()
                head = received.split(b"\r\n\r\n", 1)[0].decode().lower()
                assert head.startswith("http/1.1 200")
                assert "content-type: application/x-ndjson" in head
                # The watch is open once the headers came: what is raised now is streamed.
                job_id = await controlled.enqueue("reports", {"secret": "s3cr3t"})
                while b"job.added" not in received:
                    received += await stream.receive()
                while not re.search(rb'"job.added".*?\}\n', received):
                    received += await stream.receive()
        found = re.search(rb'\{"name": "job.added".*?\}\n', received)
        assert found is not None
        event = json.loads(found.group())
        assert event["job_id"] == job_id
        assert b"s3cr3t" not in received
    closed = dashboard_app(controlled, token=TOKEN)
    async with serving(closed, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        refused = await client.get("/api/queues/reports/events")
        assert refused.status_code == 401


async def test_cancel_ends_a_waiting_job_and_says_when_it_cannot(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        done = await client.post("/api/jobs/report-due/cancel", headers=ACTION)
        assert done.status_code == 200
        assert done.json() == {"job_id": "report-due", "cancelled": True}
        info = await controlled.job_info("report-due")
        assert info is not None
        assert info.state == "cancelled"
        shown = (await client.get("/api/jobs/report-due", headers=READ)).json()
        assert shown["actions"] == {"promote": False, "rerun": True, "cancel": False}
        for job_id in ("report-due", "report-done"):
            again = await client.post(f"/api/jobs/{job_id}/cancel", headers=ACTION)
            assert again.status_code == 409, job_id
            assert "only a pending, parked or running job" in again.json()["error"]
            assert "nothing was done" in again.json()["error"]
        missing = await client.post("/api/jobs/job-nope/cancel", headers=ACTION)
        assert missing.status_code == 404
        assert missing.json()["code"] == "queue/job-not-found"


async def test_rerun_runs_a_finished_job_again_and_says_when_it_cannot(
    controlled: Queue, anyio_backend: str
) -> None:
    app = dashboard_app(controlled, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        done = await client.post("/api/jobs/report-done/rerun", headers=ACTION)
        assert done.json() == {"job_id": "report-done", "rerun": True}
        info = await controlled.job_info("report-done")
        assert info is not None
        assert (info.state, info.job.attempts) == ("pending", 0)
        again = await client.post("/api/jobs/report-done/rerun", headers=ACTION)
        assert again.status_code == 409
        assert "it is pending, and only a done, dead or cancelled job" in again.json()["error"]
        missing = await client.post("/api/jobs/job-nope/rerun", headers=ACTION)
        assert missing.status_code == 404
        assert missing.json()["code"] == "queue/job-not-found"


async def test_promote_and_rerun_are_the_operators(controlled: Queue, anyio_backend: str) -> None:
    app = dashboard_app(controlled, token=TOKEN, read_only_open=True)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        for path in (
            "/api/jobs/report-later/promote",
            "/api/jobs/report-done/rerun",
            "/api/jobs/report-due/cancel",
        ):
            assert (await client.post(path)).status_code == 401
            no_token = await client.post(path, headers={"X-Blamequeue-Action": "1"})
            assert no_token.status_code == 401
            assert "operator" in no_token.json()["error"]
            no_csrf = await client.post(path, headers=READ)
            assert no_csrf.status_code == 403
            assert "X-Blamequeue-Action: 1" in no_csrf.json()["error"]
            assert "operator" in no_csrf.json()["error"]
            evil = await client.post(path, headers={**ACTION, "Origin": "http://evil.example"})
            assert evil.status_code == 403
        assert (await client.get("/api/jobs/report-done/logs")).status_code == 200  # a read
    later, done = [await controlled.job_info(j) for j in ("report-later", "report-done")]
    assert later is not None
    assert done is not None
    assert later.job.available_at.timestamp() > controlled.clock.now()  # nothing was done
    assert done.state == "done"
    open_only = dashboard_app(controlled, read_only_open=True)  # no token: no operator at all
    async with serving(open_only, anyio_backend) as url, httpx.AsyncClient(base_url=url) as c:
        refused = await c.post("/api/jobs/report-done/rerun", headers=ACTION)
        assert refused.status_code == 403
        assert "operator" in refused.json()["error"]
        assert "read-only" in refused.json()["error"]


async def test_head_of_the_page_answers_as_its_get(seeded: Queue, anyio_backend: str) -> None:
    app = dashboard_app(seeded, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/")
        head = await client.head("/")
        assert head.status_code == 200
        assert head.headers["content-type"] == page.headers["content-type"]
        assert head.headers["content-length"] == str(len(page.content))
        assert head.content == b""


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with RedisServer() as server:
        yield server.url


async def test_promote_and_rerun_act_on_redis(redis_url: str, anyio_backend: str) -> None:
    with redis.Redis.from_url(redis_url) as raw:
        raw.flushall()
    queue = Queue(backends={"r": {"protocol": "redis", "url": redis_url, "seal": False}})
    async with queue:
        await queue.enqueue("reports", {"n": 2}, job_id="report-later", delay=3600)
        await queue.enqueue("reports", {"n": 1}, job_id="report-done")
        await queue.tick("reports", _report, max=1)
        app = dashboard_app(queue, token=TOKEN)
        async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
            for path in ("/api/jobs/report-later/promote", "/api/jobs/report-done/rerun"):
                answer = await client.post(path, headers=ACTION)
                assert answer.status_code == 200, (path, answer.text)
            logs = (await client.get("/api/jobs/report-done/logs", headers=READ)).json()
            assert [line["message"] for line in logs["logs"]][1] == "wrote the report"
        later = await queue.job_info("report-later")
        assert later is not None
        assert later.job.available_at.timestamp() <= queue.clock.now()
        rerun = await queue.job_info("report-done")
        assert rerun is not None
        assert rerun.state == "pending"
