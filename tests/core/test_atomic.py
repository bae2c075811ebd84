"""Atomic writes: whole files only, and readable by others."""

from __future__ import annotations

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
