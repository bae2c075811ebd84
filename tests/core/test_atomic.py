"""Atomic writes: whole files only, and readable by others."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import InputError


def test_new_file_is_0644_and_complete(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "catalog.json"
    write_text_atomic(path, "{}\n")
    assert path.read_text() == "{}\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["catalog.json"]


def test_replacing_keeps_the_old_mode(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text("old")
    path.chmod(0o640)
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "catalog.json"
    path.write_text("old")

    def failing_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("gpuforge.atomic.os.fsync", failing_fsync)
    with pytest.raises(InputError, match="cannot write the file \\(disk full\\)"):
        write_text_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["catalog.json"]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "kept").write_text("inside")


def _link_to_file(path: Path) -> None:
    (path.parent / "real.json").write_text("old")
    path.symlink_to(path.parent / "real.json")


def _dangling_link(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.json")


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (_fifo, "a FIFO"),
        (_folder, "a directory"),
        (_link_to_file, "a symbolic link"),
        (_dangling_link, "a symbolic link"),
    ],
)
def test_a_target_that_is_not_a_regular_file_is_refused_and_left_as_it_was(
    tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    """As root, `validate --plot /dev/full` replaced the device with a file: rename replaces anything."""
    target = tmp_path / "out.json"
    make(target)
    before = sorted((p.name, p.lstat().st_mode) for p in tmp_path.iterdir())
    with pytest.raises(InputError) as caught:
        write_text_atomic(target, "new")
    message = caught.value.message
    assert f"{target}: cannot write the file: it is {kind}, not a regular file" in message
    assert "Fix:" in message
    assert sorted((p.name, p.lstat().st_mode) for p in tmp_path.iterdir()) == before  # no temp file either


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/null").is_char_device(), reason="mknod needs root")
def test_a_device_is_refused(tmp_path: Path) -> None:
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the character device /dev/null is
    with pytest.raises(InputError, match="it is a device"):
        write_text_atomic(device, "new")
    assert device.is_char_device()
