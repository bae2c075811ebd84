"""`gpuforge matrix check/show` as a user runs them: exit codes, output, JSON shape."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from matrix_cases import MATRICES

from gpuforge.cli import main

SHIPPED = sorted(str(p) for p in MATRICES.glob("*.yaml"))


def test_shipped_matrices_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "check", *SHIPPED]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == len(SHIPPED)


def test_json_shape(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(re.sub(r"(?m)^kernel: .*$", "kernel: latest", Path(SHIPPED[0]).read_text()))
    assert main(["matrix", "check", SHIPPED[0], str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["files"]
    good, failed = report["files"]
    assert set(good) == {"path", "digest", "findings"} and good["findings"] == []
    assert len(good["digest"]) == 64
    assert failed["findings"] == [
        {
            "rule": "pin.exact",
            "severity": "error",
            "field": "kernel",
            "message": failed["findings"][0]["message"],
            "source": failed["findings"][0]["source"],
        }
    ]


def test_unreadable_file_exits_2_and_is_reported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["matrix", "check", SHIPPED[0], str(tmp_path / "missing.yaml"), "--json"]) == 2
    files = json.loads(capsys.readouterr().out)["files"]
    assert files[1]["findings"][0]["rule"] == "file.unreadable"


def test_not_yaml_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    assert main(["matrix", "check", str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().out


def test_yaml_that_is_not_a_mapping_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    assert main(["matrix", "check", str(path)]) == 1
    assert "YAML mapping" in capsys.readouterr().out


def test_show_prints_normalized_matrix_and_digest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "show", SHIPPED[0], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["matrix"]["aws_ofi_nccl"]["install"] == "bundled"
    assert len(shown["digest"]) == 64


def test_show_refuses_an_invalid_matrix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(re.sub(r"(?m)^cuda: .*$", 'cuda: "12.*"', Path(SHIPPED[0]).read_text()))
    assert main(["matrix", "show", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "pin.exact" in err and "Traceback" not in err


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "gpuforge"), "matrix", "show", str(missing)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot read the matrix: no such file" in done.stderr and "Traceback" not in done.stderr
