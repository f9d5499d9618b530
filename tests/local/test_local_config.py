"""LocalBackend options: checked at construction, without I/O, with errors naming the fault."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_helpers import make_backend

from blamequeue.errors import ConfigError


@pytest.fixture
def connection() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    yield connection
    connection.close()


def invalid(**options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        make_backend(**options)
    assert info.value.code == "queue/invalid-config"
    return info.value


def test_construction_does_no_io(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "jobs.db"
    make_backend(path=str(path))
    assert not path.parent.exists()


def test_accepts_every_documented_option(tmp_path: Path) -> None:
    backend = make_backend(
        path=tmp_path / "jobs.db",
        table="app_jobs",
        schema="main",
        durability="full",
        busy_timeout=0.5,
    )
    assert backend.store_path == str(tmp_path / "jobs.db")


def test_unknown_option_is_refused_by_name() -> None:
    error = invalid(paht="x.db")
    assert "'paht'" in error.message
    assert "'path'" in error.message


@pytest.mark.parametrize(
    "table",
    [
        'jobs"; DROP TABLE x; --',
        "jobs; DROP TABLE x",
        'a"b',
        "has space",
        "1starts_with_digit",
        "",
        "x" * 64,
        "tab\u00e9",
        "jobs\n",
        "sqlite_jobs",
        7,
        None,
    ],
)
def test_unsafe_table_names_are_refused(table: object) -> None:
    assert "'table'" in invalid(table=table).message


@pytest.mark.parametrize("schema", ['main"', "main.x", "", "1db", "temp; x", 3])
def test_unsafe_schema_names_are_refused(schema: object, connection: sqlite3.Connection) -> None:
    assert "'schema'" in invalid(schema=schema, store=connection).message


def test_longest_identifiers_are_accepted(connection: sqlite3.Connection) -> None:
    make_backend(table="t" * 63, schema="_" + "s" * 62, store=connection)


def test_attached_schema_needs_a_store() -> None:
    assert "ATTACH" in invalid(schema="side").message


def test_path_and_store_are_exclusive(connection: sqlite3.Connection) -> None:
    assert "'path'" in invalid(path="x.db", store=connection).message


@pytest.mark.parametrize("option", [{"durability": "full"}, {"busy_timeout": 1.0}])
def test_store_settings_cannot_combine_with_a_store(
    option: dict[str, Any], connection: sqlite3.Connection
) -> None:
    invalid(store=connection, **option)


@pytest.mark.parametrize("store", [object(), "app.db", 42])
def test_store_must_be_a_connection_or_a_store(store: object) -> None:
    assert "blamequeue_local.Store" in invalid(store=store).message


@pytest.mark.parametrize("durability", ["fast", "FULL", 1, True])
def test_durability_is_normal_or_full(durability: object) -> None:
    assert "'durability'" in invalid(durability=durability).message


@pytest.mark.parametrize("busy_timeout", [-1, float("nan"), float("inf"), "5", True])
def test_busy_timeout_is_finite_seconds(busy_timeout: object) -> None:
    assert "'busy_timeout'" in invalid(busy_timeout=busy_timeout).message


@pytest.mark.parametrize("path", [b"jobs.db", 5, ""])
def test_path_is_text(path: object) -> None:
    assert "'path'" in invalid(path=path).message
