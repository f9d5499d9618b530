"""Tasks: named job types declared once, dispatched by name or reference, run by name."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import blamequeue
from blamequeue import JobContext, Queue, QueueError, Task
from blamequeue_testing import QueueFake, VirtualClock

pytestmark = pytest.mark.anyio


@dataclasses.dataclass
class Welcome:
    email: str
    name: str = "friend"


@attrs.frozen
class Invoice:
    number: int


seen: list[Any] = []


class SendWelcomeEmail(Task[Welcome]):
    queue = "emails"
    tries = 4
    backoff = [10, 30, 60]

    async def handle(self, payload: Welcome, ctx: JobContext) -> str:
        seen.append((payload, ctx.job.task, dict(ctx.job.context)))
        return f"sent to {payload.email}"


class PrintInvoice(Task[Invoice]):
    name = "invoices.print"

    def handle(self, payload: Invoice, ctx: Any) -> None:
        seen.append((payload, threading.current_thread() is threading.main_thread()))


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    seen.clear()


async def _run_all(queue: Queue, queue_name: str) -> blamequeue.TickResult:
    return await queue.tick(queue_name, queue.tasks, max=100)


async def test_function_task_round_trip_rebuilds_the_payload(bq_queue: Queue) -> None:
    @bq_queue.task(queue="emails")
    async def greet(payload: Welcome, ctx: JobContext) -> None:
        seen.append(payload)

    job_id = await greet.dispatch(Welcome(email="ada@example.com"))
    info = await bq_queue.job_info(job_id)
    assert info is not None
    assert info.job.payload == {"email": "ada@example.com", "name": "friend"}
    assert info.job.task == "greet"
    result = await _run_all(bq_queue, "emails")
    assert result.succeeded == 1
    assert seen == [Welcome(email="ada@example.com")]


async def test_class_task_dispatches_to_the_queue_it_is_registered_on(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    job_id = await SendWelcomeEmail.dispatch(Welcome(email="b@example.com", name="Bo"))
    info = await bq_queue.job_info(job_id)
    assert info is not None
    assert (info.job.queue, info.job.max_attempts) == ("emails", 4)
    await _run_all(bq_queue, "emails")
    assert seen == [(Welcome(email="b@example.com", name="Bo"), "SendWelcomeEmail", {})]


async def test_sync_handle_runs_in_a_worker_thread_with_attrs_payload(bq_queue: Queue) -> None:
    bq_queue.register(PrintInvoice)
    await bq_queue.job("invoices.print", Invoice(number=7)).dispatch()
    result = await _run_all(bq_queue, "default")
    assert result.succeeded == 1
    assert seen == [(Invoice(number=7), False)]


async def test_builder_sets_every_option(bq_queue: Queue, bq_clock: VirtualClock) -> None:
    bq_queue.register(SendWelcomeEmail)
    job_id = await (
        bq_queue.job("SendWelcomeEmail", Welcome(email="c@example.com"))
        .on_queue("vip")
        .delay(60)
        .tries(5)
        .backoff([1, 2])
        .priority(3)
        .with_context(user_id=1)
        .with_context(locale="fr")
        .dispatch()
    )
    info = await bq_queue.job_info(job_id)
    assert info is not None
    job = info.job
    assert (job.queue, job.max_attempts, job.priority) == ("vip", 5, 3)
    assert (job.available_at - job.created_at).total_seconds() == 60
    assert job.context == {"user_id": 1, "locale": "fr"}
    assert (await _run_all(bq_queue, "vip")).leased == 0
    bq_clock.advance(60)
    await _run_all(bq_queue, "vip")
    assert seen[0][2] == {"user_id": 1, "locale": "fr"}


async def test_builder_is_immutable_so_a_base_can_be_reused(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    base = bq_queue.job(SendWelcomeEmail, Welcome(email="d@example.com"))
    delayed = base.delay(30)
    first = await bq_queue.job_info(await base.dispatch())
    second = await bq_queue.job_info(await delayed.dispatch())
    assert first is not None
    assert second is not None
    assert first.job.available_at == first.job.created_at
    assert (second.job.available_at - second.job.created_at).total_seconds() == 30


async def test_task_backoff_applies_to_retries(bq_queue: Queue, bq_clock: VirtualClock) -> None:
    @bq_queue.task(backoff=[7], tries=2)
    async def flaky(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError("down")

    job_id = await flaky.dispatch({"n": 1})
    assert (await _run_all(bq_queue, "default")).failed == 1
    info = await bq_queue.job_info(job_id)
    assert info is not None
    assert info.state == "pending"
    assert (info.job.available_at.timestamp() - bq_clock.now()) == pytest.approx(7)
    bq_clock.advance(7)
    assert (await _run_all(bq_queue, "default")).moved_to_dlq == 1


async def test_dispatch_if_unless_after_and_now(bq_queue: Queue, bq_clock: VirtualClock) -> None:
    bq_queue.register(SendWelcomeEmail)
    payload = Welcome(email="e@example.com")
    assert await SendWelcomeEmail.dispatch_if(False, payload) is None
    assert await SendWelcomeEmail.dispatch_unless(True, payload) is None
    assert await SendWelcomeEmail.dispatch_if(True, payload) is not None
    assert await SendWelcomeEmail.dispatch_unless(False, payload) is not None
    later = await SendWelcomeEmail.dispatch_after(120, payload)
    info = await bq_queue.job_info(later)
    assert info is not None
    assert info.job.available_at.timestamp() == pytest.approx(bq_clock.now() + 120)
    assert await bq_queue.size("emails") == 3
    assert await SendWelcomeEmail.dispatch_now(payload) == "sent to e@example.com"
    assert await bq_queue.size("emails") == 3  # dispatch_now stores nothing
    assert seen == [(payload, "SendWelcomeEmail", {})]


async def test_dispatch_now_runs_sync_handlers_in_a_thread(bq_queue: Queue) -> None:
    bq_queue.register(PrintInvoice)
    assert await PrintInvoice.dispatch_now(Invoice(number=1)) is None
    assert seen == [(Invoice(number=1), False)]


async def test_unknown_name_is_refused_at_dispatch_with_suggestions(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    with pytest.raises(QueueError) as caught:
        bq_queue.job("SendWelcomeEmial", {"email": "x"})
    assert caught.value.code == "queue/unknown-job"
    assert "did you mean 'SendWelcomeEmail'" in caught.value.message
    assert await bq_queue.size("emails") == 0


async def test_unregistered_class_dispatch_is_not_initialized() -> None:
    class Orphan(Task[Any]):
        async def handle(self, payload: Any, ctx: Any) -> None: ...

    with pytest.raises(QueueError) as caught:
        await Orphan.dispatch({})
    assert caught.value.code == "queue/not-initialized"
    assert "queue.register(Orphan)" in caught.value.message

    @blamequeue.task
    async def loose(payload: Any, ctx: Any) -> None: ...

    with pytest.raises(QueueError, match="not registered on a Queue"):
        await loose.dispatch({})


async def test_worker_without_the_task_retries_then_dead_letters(
    bq_queue: Queue, bq_clock: VirtualClock
) -> None:
    producer_side = bq_queue.register(SendWelcomeEmail)
    job_id = await producer_side.dispatch(Welcome(email="f@example.com"))
    bare = Queue(backends={"memory": {"protocol": "memory"}}, clock=bq_clock)
    worker_registry = bare.tasks  # knows no tasks: an old deploy
    for _ in range(4):
        await bq_queue.tick("emails", worker_registry, max=10)
        bq_clock.advance(120)
    dead = await bq_queue.dlq_list("emails")
    assert [d.job_id for d in dead] == [job_id]
    assert "queue/unknown-job" in (dead[0].last_error or "")
    assert "no task named 'SendWelcomeEmail'" in (dead[0].last_error or "")


async def test_plain_job_under_a_task_registry_fails_with_advice(bq_queue: Queue) -> None:
    await bq_queue.enqueue("default", {"raw": True}, max_attempts=1)
    result = await _run_all(bq_queue, "default")
    assert result.moved_to_dlq == 1
    (dead,) = await bq_queue.dlq_list("default")
    assert "not dispatched as a task" in (dead.last_error or "")


async def test_context_must_be_json_and_nothing_is_stored(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    with pytest.raises(QueueError) as caught:
        await SendWelcomeEmail.pending(Welcome(email="g")).with_context(when=object()).dispatch()
    assert caught.value.code == "queue/bad-argument"
    assert "with_context values must be JSON-serialisable" in caught.value.message
    assert await bq_queue.size("emails") == 0


@pytest.mark.parametrize(
    ("setter", "value", "fragment"),
    [
        ("delay", -1, "delay"),
        ("tries", 0, "max_attempts"),
        ("timeout", 0, "timeout must be a positive number"),
        ("priority", 1.5, "priority must be an int"),
        ("backoff", "soon", "backoff"),
        ("on_queue", "", "queue"),
    ],
)
async def test_builder_setters_check_their_argument(
    bq_queue: Queue, setter: str, value: Any, fragment: str
) -> None:
    bq_queue.register(SendWelcomeEmail)
    pending = bq_queue.job(SendWelcomeEmail, Welcome(email="h"))
    with pytest.raises(QueueError) as caught:
        getattr(pending, setter)(value)
    assert caught.value.code == "queue/bad-argument"
    assert fragment in caught.value.message


async def test_registering_two_tasks_under_one_name_is_refused(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    bq_queue.register(SendWelcomeEmail)  # the same task again: fine

    class Impostor(Task[Any]):
        name = "SendWelcomeEmail"

        async def handle(self, payload: Any, ctx: Any) -> None: ...

    with pytest.raises(QueueError) as caught:
        bq_queue.register(Impostor)
    assert caught.value.code == "queue/invalid-config"
    assert "two different tasks are named 'SendWelcomeEmail'" in caught.value.message
    assert "Impostor" in caught.value.message


async def test_bad_declarations_are_refused_at_registration(bq_queue: Queue) -> None:
    class NoTries(Task[Any]):
        tries = 0

        async def handle(self, payload: Any, ctx: Any) -> None: ...

    with pytest.raises(QueueError) as caught:
        bq_queue.register(NoTries)
    assert caught.value.code == "queue/invalid-config"
    assert "task NoTries" in caught.value.message
    with pytest.raises(QueueError, match="Task subclass with a handle"):
        bq_queue.register(Task)
    with pytest.raises(QueueError) as bad_function:
        bq_queue.task(timeout=-1)(lambda payload, ctx: None)
    assert bad_function.value.code == "queue/bad-argument"


async def test_registry_lists_tasks_by_name_and_queue(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    bq_queue.register(PrintInvoice)
    assert list(bq_queue.tasks) == ["SendWelcomeEmail", "invoices.print"]
    assert "SendWelcomeEmail" in bq_queue.tasks
    assert len(bq_queue.tasks) == 2
    assert bq_queue.tasks.on_queue("emails") == ["SendWelcomeEmail"]


async def test_discover_registers_the_tasks_of_a_package(
    bq_queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "shopjobs"
    (package / "billing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "billing" / "__init__.py").write_text("")
    (package / "mail.py").write_text(
        textwrap.dedent(
            """
            import blamequeue
            from blamequeue import Task

            class SendReceipt(Task[dict]):
                queue = "mail"
                async def handle(self, payload, ctx):
                    return payload["to"]

            @blamequeue.task(queue="mail")
            async def send_digest(payload, ctx):
                return "digest"

            Imported = blamequeue.Task  # not a task of this module
            """
        )
    )
    (package / "billing" / "charge.py").write_text(
        textwrap.dedent(
            """
            from blamequeue import Task
            from shopjobs.mail import SendReceipt  # imported, registered once

            class Charge(Task[dict]):
                async def handle(self, payload, ctx):
                    return payload["cents"]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert bq_queue.tasks.discover("shopjobs") == ["Charge", "SendReceipt", "send_digest"]
        await bq_queue.job("SendReceipt", {"to": "ann"}).dispatch()
        assert (await _run_all(bq_queue, "mail")).succeeded == 1
    finally:
        for name in [m for m in sys.modules if m == "shopjobs" or m.startswith("shopjobs.")]:
            del sys.modules[name]
    with pytest.raises(QueueError, match="cannot import task package 'no_such_pkg'"):
        bq_queue.tasks.discover("no_such_pkg")


async def test_consume_runs_tasks_by_name() -> None:
    all_done = anyio.Event()

    async with Queue(backends={"memory": {"protocol": "memory"}}) as queue:

        @queue.task(queue="emails")
        async def greet(payload: Welcome, ctx: JobContext) -> None:
            seen.append(payload.email)
            if len(seen) == 5:
                all_done.set()

        for n in range(5):
            await greet.dispatch(Welcome(email=f"{n}@example.com"))
        consumer = await queue.consume("emails", queue.tasks, concurrency=3)
        with anyio.fail_after(10):
            await all_done.wait()
        consumer.cancel()
    assert sorted(seen) == [f"{n}@example.com" for n in range(5)]


def test_a_type_checker_flags_a_wrong_payload(tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    source = tmp_path / "typed_dispatch.py"
    source.write_text(
        textwrap.dedent(
            """
            import dataclasses
            from typing import Any
            from blamequeue import Queue, Task

            @dataclasses.dataclass
            class Welcome:
                email: str

            class SendWelcome(Task[Welcome]):
                async def handle(self, payload: Welcome, ctx: Any) -> None: ...

            async def main(queue: Queue) -> None:
                @queue.task
                async def greet(payload: Welcome, ctx: Any) -> None: ...

                await SendWelcome.dispatch(Welcome(email="ok"))
                await greet.dispatch(Welcome(email="ok"))
                queue.job(SendWelcome, Welcome(email="ok"))
                await SendWelcome.dispatch({"email": "wrong"})
                await greet.dispatch(42)
                queue.job(SendWelcome, "wrong")
            """
        )
    )
    out, _err, status = mypy_api.run(
        ["--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out
    assert [line.split(":")[1] for line in errors] == ["20", "21", "22"], out


async def test_queue_fake_records_task_dispatches_instead_of_storing(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)

    @bq_queue.task(queue="reports")
    async def build_report(payload: dict[str, Any], ctx: JobContext) -> str:
        return f"report {payload['month']}"

    with QueueFake(bq_queue) as fake:
        await SendWelcomeEmail.dispatch(Welcome(email="a@example.com"))
        await SendWelcomeEmail.dispatch_after(60, Welcome(email="b@example.com"))
        await bq_queue.job(build_report, {"month": "2026-12"}).with_context(by=1).dispatch()
    assert await bq_queue.size("emails") == 0  # nothing reached the backend
    fake.assert_dispatched(SendWelcomeEmail, Welcome(email="a@example.com"))
    fake.assert_dispatched_times(SendWelcomeEmail, 2)
    fake.assert_dispatched_with_delay(SendWelcomeEmail, 60, lambda d: d.payload.email[0] == "b")
    fake.assert_dispatched_on("emails", lambda d: d.task == "SendWelcomeEmail")
    (report,) = fake.assert_dispatched(build_report)
    assert report.options == {"context": {"by": 1}}
    fake.assert_not_dispatched(PrintInvoice)
    with pytest.raises(AssertionError, match=r"of task 'SendWelcomeEmail'.*found 2") as caught:
        fake.assert_dispatched_times(SendWelcomeEmail, 3)
    assert "task 'SendWelcomeEmail' on 'emails'" in str(caught.value)


async def test_queue_fake_runs_tasks_with_their_payload_type(bq_queue: Queue) -> None:
    fake = QueueFake(bq_queue)
    assert await fake.run_job(SendWelcomeEmail, Welcome(email="c@example.com")) == (
        "sent to c@example.com"
    )
    assert seen == [(Welcome(email="c@example.com"), "SendWelcomeEmail", {})]
    assert await fake.run_job(PrintInvoice, Invoice(number=3)) is None
    err = await fake.expect_job_to_fail(PrintInvoice, {"wrong": "shape"}, TypeError)
    assert "unexpected keyword argument 'wrong'" in str(err)


async def test_task_timeout_is_enforced_on_the_worker(
    bq_queue: Queue, bq_clock: VirtualClock
) -> None:
    started = anyio.Event()

    @bq_queue.task(timeout=600, tries=1)
    async def slow(payload: Any, ctx: JobContext) -> None:
        started.set()
        await anyio.sleep_forever()

    job_id = await slow.dispatch({})
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_all, bq_queue, "default")
        await started.wait()
        bq_clock.advance(600)
    (dead,) = await bq_queue.dlq_list("default")
    assert dead.job_id == job_id
    assert (dead.last_error or "").startswith("timeout: handler ran longer than 600")


async def test_builder_timeout_overrides_the_task(bq_queue: Queue) -> None:
    bq_queue.register(SendWelcomeEmail)
    job_id = await bq_queue.job(SendWelcomeEmail, Welcome(email="t")).timeout(5).dispatch()
    stored = await bq_queue._runtime(None).backend.get_job(job_id)
    assert stored is not None
    assert '"timeout": 5.0' in (stored.meta or "")
