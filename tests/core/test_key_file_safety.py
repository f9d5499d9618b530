"""The seal key file is private (SPEC §6 "Files"): created 0600 whatever the umask, and a key
file others could read or write, one owned by someone else, or a symbolic link is refused with
``queue/invalid-config`` saying how to fix it, before its key is read."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from blamequeue._sealing import load_or_create_key_file
from blamequeue.errors import ConfigError

K1 = base64.b64encode(b"1" * 32).decode()

needs_posix_owners = pytest.mark.skipif(
    not hasattr(os, "geteuid"), reason="file owners and modes are POSIX only"
)
pytestmark = needs_posix_owners


@pytest.fixture
def umask_0() -> Iterator[None]:
    """The most permissive umask: whatever is created must set its own mode."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def a_key_file(path: Path, file_mode: int = 0o600) -> Path:
    path.write_text(f"k1:{K1}\n")
    path.chmod(file_mode)
    return path


def refusal(path: Path | str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_or_create_key_file(str(path))
    assert info.value.code == "queue/invalid-config"
    assert K1 not in str(info.value)  # the refusal never shows the key
    return info.value


def test_a_new_key_file_is_0600_under_umask_0(tmp_path: Path, umask_0: None) -> None:
    path = tmp_path / "jobs.db.key"
    _, created = load_or_create_key_file(str(path))
    assert created
    assert mode(path) == 0o600


def test_a_new_key_file_is_0600_under_umask_0_without_hard_links(
    tmp_path: Path, umask_0: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError("this filesystem has no hard links")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "jobs.db.key"
    _, created = load_or_create_key_file(str(path))
    assert created
    assert mode(path) == 0o600


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_key_file_group_or_others_can_use_is_refused_with_chmod_600(
    tmp_path: Path, file_mode: int
) -> None:
    path = a_key_file(tmp_path / "jobs.db.key", file_mode)
    error = refusal(path)
    assert f"`chmod 600 {path}`" in error.message
    assert f"mode {file_mode:o}" in error.message
    assert mode(path) == file_mode  # refused, not silently changed


def test_a_refused_key_file_works_once_its_mode_is_fixed(tmp_path: Path) -> None:
    path = a_key_file(tmp_path / "jobs.db.key", 0o644)
    refusal(path)
    path.chmod(0o600)
    keys, created = load_or_create_key_file(str(path))
    assert (list(keys), created) == (["k1"], False)


def test_the_fix_quotes_a_path_with_spaces(tmp_path: Path) -> None:
    path = a_key_file(tmp_path / "my jobs.db.key", 0o644)
    assert f"`chmod 600 '{path}'`" in refusal(path).message


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0, reason="chown needs root")
def test_a_key_file_owned_by_another_user_is_refused_with_chown(tmp_path: Path) -> None:
    path = a_key_file(tmp_path / "jobs.db.key")
    os.chown(path, 65534, -1)
    error = refusal(path)
    assert "user id 65534" in error.message
    assert f"`chown {os.geteuid()} {path}`" in error.message


def test_a_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    target = a_key_file(tmp_path / "elsewhere.key")
    link = tmp_path / "jobs.db.key"
    link.symlink_to(target)
    error = refusal(link)
    assert "symbolic link" in error.message
    assert str(link) in error.message


def test_a_dangling_symlink_is_refused_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "nowhere.key"
    link = tmp_path / "jobs.db.key"
    link.symlink_to(target)
    assert "symbolic link" in refusal(link).message
    assert not target.exists()  # no key was created at the link's target


def test_a_directory_in_place_of_the_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db.key"
    path.mkdir(mode=0o700)
    with pytest.raises(ConfigError) as info:
        load_or_create_key_file(str(path))
    assert "not a regular file" in info.value.message
