"""What a failed job's ``last_error`` holds (SPEC §14, "Errors people read"): the exception's
type and message first, then the traceback of the user's own code, without the frames inside
blamequeue and with installed packages' paths shortened; a chained cause stays readable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

import blamequeue
from blamequeue import Job, JobContext, Queue
from blamequeue._tracebacks import short_path

pytestmark = pytest.mark.anyio

HERE = str(Path(__file__).resolve())
LIBRARY = str(Path(blamequeue.__file__).resolve().parent)


@attrs.frozen
class _Field:
    name: str = "customer_id"


def _check_customer(value: Any) -> None:
    # Raises inside attrs, an installed package: its frame is shown with a short path.
    attrs.validators.instance_of(int)(None, _Field(), value)


def _load(job: Job) -> None:
    try:
        _check_customer(job.payload["customer_id"])
    except TypeError as exc:
        raise LookupError(f"order {job.payload['order']} has no customer") from exc


async def _async_handler(job: Job, ctx: JobContext) -> None:
    _load(job)


def _sync_handler(job: Job, ctx: Any) -> None:
    _load(job)


@pytest.mark.parametrize("handler", [_async_handler, _sync_handler], ids=["async", "sync"])
async def test_last_error_is_type_and_message_first_then_the_users_frames_only(
    anyio_backend: str, handler: Any
) -> None:
    async with Queue(backends={"m": {"protocol": "memory"}}, sweep_interval=0) as queue:
        job_id = await queue.enqueue("orders", {"order": 7, "customer_id": "c-1"}, max_attempts=1)
        await queue.tick("orders", handler, max=1)
        info = await queue.job_info(job_id)

    assert info is not None
    error = info.job.last_error
    assert error is not None
    assert error.splitlines()[0] == "LookupError: order 7 has no customer"
    files = re.findall(r'File "([^"]+)", line \d+, in (\S+)', error)
    assert (HERE, handler.__name__) in files  # the user's frames, with their real paths
    assert (HERE, "_load") in files
    assert (HERE, "_check_customer") in files
    assert ("<site-packages>/attr/validators.py", "__call__") in files
    for path, _ in files:
        assert not path.startswith(LIBRARY), error  # no frame inside blamequeue
        assert "site-packages/" not in path or path.startswith("<site-packages>/"), error
    # The cause, then the error it became, as Python tells a chain.
    assert "The above exception was the direct cause of the following exception:" in error
    assert error.index("TypeError: ") < error.index("direct cause") < error.rindex("LookupError")


def test_paths_of_the_standard_library_and_installed_packages_are_shortened() -> None:
    assert short_path(json.__file__) == "<stdlib>/json/__init__.py"
    assert short_path(attrs.__file__) == "<site-packages>/attrs/__init__.py"
    debian = "/usr/lib/python3/dist-packages/yaml/main.py"
    assert short_path(debian) == "<dist-packages>/yaml/main.py"
    assert short_path(HERE) == HERE
    assert short_path("<string>") == "<string>"
