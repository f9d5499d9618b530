"""Tasks in a downstream test suite: each test's ``bq_queue`` has its own task registry, so two
test modules may declare different tasks of the same name, and a task registered in one test
does not dispatch to that test's (shut down) queue from the next one."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

MODULE = """
import pytest
from blamequeue import task

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@task(name="send")
async def send(payload, ctx):
    return "{module}"


async def test_send(bq_queue):
    bq_queue.register(send)
    job_id = await send.dispatch({{}})
    assert (await bq_queue.tick("default", bq_queue.tasks)).succeeded == 1
    assert await bq_queue.result(job_id) == "{module}"
"""

LATER = """
import pytest
from blamequeue import QueueError
from test_a import send

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_task_registered_in_an_earlier_test_is_not_on_this_queue(bq_queue):
    with pytest.raises(QueueError) as info:
        await send.dispatch({})
    assert info.value.code == "queue/not-initialized"
    assert "not registered on a Queue" in info.value.message
"""


def test_two_modules_declare_a_task_of_the_same_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_a=MODULE.format(module="a"),
        test_b=MODULE.format(module="b"),
        test_c=LATER,
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_two_different_tasks_of_one_name_on_one_queue_are_named_in_the_error() -> None:
    from blamequeue import Queue, QueueError, task

    @task(name="send")
    async def first(payload: object, ctx: object) -> None: ...

    @task(name="send")
    async def second(payload: object, ctx: object) -> None: ...

    queue = Queue({"default": {"protocol": "memory"}})
    queue.register(first)
    with pytest.raises(QueueError) as info:
        queue.register(second)
    assert info.value.code == "queue/invalid-config"
    message = info.value.message
    assert "first" in message
    assert "second" in message
    assert "another name" in message


def test_a_module_imported_again_registers_its_task_again() -> None:
    from blamequeue import Queue, task

    queue = Queue({"default": {"protocol": "memory"}})
    declared = []
    for _ in range(2):  # the same source twice, as a module imported under a second name

        @task(name="send")
        async def send(payload: object, ctx: object) -> None: ...

        declared.append(send)
        queue.register(send)
    assert queue.tasks.get("send").target is declared[-1]
