"""Names from files and AWS reach the terminal escaped, and error messages quote hostile values cut short."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from catalog_records import made_up_entry

from gpuforge.cli import main
from gpuforge.display import cut, printable, printable_lines
from gpuforge.images.catalog import record_entry, record_name
from gpuforge.images.progress import Progress
from gpuforge.preflight.report import Check, Status, render_text

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "images" / "matrices" / "g6-dev-cuda12.yaml"
# An ANSI clear-screen, a carriage return that overwrites the line, a forged line, a right-to-left override.
HOSTILE = "evil\x1b[2J\rok: all good\n\u202etxt.exe"
RAW = ("\x1b", "\r", "\u202e")


def _clean(text: str) -> bool:
    return not any(ch in text for ch in RAW)


def test_printable_escapes_controls_and_keeps_printable_text() -> None:
    assert printable(HOSTILE) == "evil\\x1b[2J\\rok: all good\\n\\u202etxt.exe"
    assert printable("café 12 µs") == "café 12 µs"
    assert printable_lines("a\x1b[31m\nb") == "a\\x1b[31m\nb"


def test_cut_bounds_a_hostile_value_and_says_how_long_it_was() -> None:
    shown = cut("x" * 100_000)
    assert len(shown) < 120
    assert shown.startswith("'xxx") and shown.endswith("... (100000 characters)")
    assert cut("us-east-1") == "'us-east-1'"
    assert cut(HOSTILE + "a" * 200).count("\x1b") == 0


def test_preflight_report_escapes_what_aws_returned() -> None:
    text = render_text([Check("ami", Status.FAIL, f"tag gpuforge:matrix is {HOSTILE}", "rebuild")])
    assert _clean(text)
    assert "\\x1b[2J" in text
    assert len(text.splitlines()) == 2  # the check and the verdict: no forged line


def test_packer_progress_lines_are_escaped(tmp_path: Path) -> None:
    stream = io.StringIO()
    progress = Progress(stream, tty=False)
    progress.step(f"amazon-ebs: AMI name {HOSTILE}")
    progress.error(f"packer failed on {HOSTILE}")
    assert _clean(stream.getvalue())


def test_matrix_check_escapes_a_hostile_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = tmp_path / "m\x1b[2J.yaml"
    evil.write_text("name: [unclosed\n", encoding="utf-8")
    code = main(["matrix", "check", str(evil)])
    captured = capsys.readouterr()
    assert code in (1, 2)
    assert _clean(captured.out + captured.err)
    assert "m\\x1b[2J.yaml" in captured.out + captured.err


def _catalog_with(tmp_path: Path, field: str, value: str) -> Path:
    folder = tmp_path / "catalog"
    entry = made_up_entry(MATRIX, "ami-0123456789abcdef0", "us-east-1")
    record_entry(folder, entry)
    record = folder / record_name(entry)
    document = json.loads(record.read_text(encoding="utf-8"))
    document["images"][entry.matrix_digest]["us-east-1"][field] = value
    record.write_text(json.dumps(document), encoding="utf-8")
    return folder


def test_an_error_quoting_a_hostile_catalog_value_is_escaped_and_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _catalog_with(tmp_path, "ami_id", HOSTILE + "x" * 100_000)
    assert main(["image", "list", "--catalog", str(folder)]) == 2
    err = capsys.readouterr().err
    assert _clean(err)
    assert len(err) < 1_500, len(err)
    assert "ami_id" in err and f"({len(HOSTILE) + 100_000} characters)" in err and "Fix:" in err
