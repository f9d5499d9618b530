"""The payload encoder (one C encoder built once) writes exactly what ``json.dumps`` with the
same options writes, and refuses what it refuses with ``queue/bad-payload``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blamequeue._codec import dumps
from blamequeue.errors import QueueError

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_payloads_are_written_as_json_dumps_writes_them(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert dumps(value) == expected
    assert json.loads(dumps(value)) == value


@pytest.mark.parametrize(
    "value", [math.nan, [math.inf], {"x": -math.inf}, {1, 2}, b"bytes", object(), "\udc80"]
)
def test_what_json_cannot_hold_is_refused(value: Any) -> None:
    with pytest.raises(QueueError) as caught:
        dumps(value)
    assert caught.value.code == "queue/bad-payload"


def test_a_payload_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(QueueError) as caught:
        dumps({"loop": loop})
    assert caught.value.code == "queue/bad-payload"
