"""The redis backend's Lua files (``blamequeue_redis/lua``): each script has its file, each file
serves a script, and the comments heading a file document it without being sent to Redis."""

from __future__ import annotations

import itertools
from importlib import resources

from blamequeue_redis._limits_script import LEASE_LIMITED
from blamequeue_redis._records_script import RECORD_SCRIPTS
from blamequeue_redis._scripts import SCRIPTS
from blamequeue_redis._stats_script import QUEUE_STATS

ALL_SCRIPTS = (*SCRIPTS, LEASE_LIMITED, QUEUE_STATS, *RECORD_SCRIPTS)
# Files that are parts of scripts rather than scripts of their own.
FRAGMENTS = {
    "queue_prelude",
    "records_prelude",
    "lease_due",
    "job_edit",
    "revive",
    "flow_release",
}


def lua_files() -> dict[str, str]:
    folder = resources.files("blamequeue_redis") / "lua"
    return {
        entry.name.removesuffix(".lua"): entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua")
    }


def header(text: str) -> list[str]:
    return list(itertools.takewhile(lambda line: line.startswith("--"), text.splitlines()))


def test_every_script_has_its_file_and_every_file_serves_a_script() -> None:
    assert set(lua_files()) == {script.name for script in ALL_SCRIPTS} | FRAGMENTS


def test_each_script_file_documents_its_arguments_and_reply() -> None:
    for name, text in lua_files().items():
        if name in FRAGMENTS:
            continue
        documented = "\n".join(header(text))
        for part in ("KEYS", "ARGV", "Returns"):
            assert part in documented, (name, part)


def test_the_comments_heading_a_file_are_not_sent() -> None:
    sent = "".join(script.source for script in ALL_SCRIPTS)
    for name, text in lua_files().items():
        assert header(text)[0] not in sent, name
    assert "${" not in sent
