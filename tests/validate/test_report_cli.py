"""`gpuforge validate report`: verdicts, exit codes and the JSON contract on the published fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.validate.floors import floors_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
H100 = str(FIXTURES / "nccl-h100-2node-gcp-a3mega.txt")
DIAG_PASS = str(FIXTURES / "dcgm-4.4.2-r2-pass.txt")
DIAG_FAIL = str(FIXTURES / "dcgm-3.3.1-r2-fail-excerpt.txt")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["validate", "report", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_json_carries_the_contract_keys_and_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    # The published 2-node H100 run (298.82 GB/s at 1 GiB) clears p4d's multi-node floor.
    code, data = _json(capsys, "--instance-type", "p4d.24xlarge", "--nodes", "2", H100, DIAG_PASS)
    assert code == 0 and data["verdict"] == "pass"
    assert {"floors", "nccl", "diag", "verdict"} <= set(data)
    nccl = data["nccl"][0]  # type: ignore[index]
    assert nccl["busbw_large"] == 298.82 and nccl["verdict"] == "pass"
    assert nccl["floor"] == floors_for("p4d.24xlarge").floor(2)
    assert nccl["sizes"][-1] == {"bytes": 8589934592, "algbw": 179.92, "busbw": 337.35, "wrong": 0}
    assert data["diag"][0]["verdict"] == "pass"  # type: ignore[index]


def test_below_the_floor_fails_with_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _json(capsys, "--instance-type", "p5.48xlarge", "--nodes", "2", H100)
    floor = floors_for("p5.48xlarge").floor(2)
    assert code == 1 and data["verdict"] == "fail"
    assert data["nccl"][0]["problems"] == [  # type: ignore[index]
        f"busbw 298.82 GB/s at 1073741824 bytes is below the floor of {floor:.2f} GB/s (90% of the expected 440.96)"
    ]


def test_a_failed_diag_fails_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _json(capsys, "--instance-type", "p4d.24xlarge", "--nodes", "2", H100, DIAG_FAIL)
    assert code == 1 and data["diag"][0]["verdict"] == "fail"  # type: ignore[index]


def test_text_view_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "busbw.svg"
    code = main(
        ["validate", "report", "--instance-type", "p5.48xlarge", "--nodes", "2", H100, "--plot", str(plot)]
    )
    out = capsys.readouterr().out
    assert code == 1 and "verdict: FAIL" in out and "  1073741824      159.37      298.82       0" in out
    svg = plot.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "polyline" in svg and "floor 396.9 GB/s" in svg


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--instance-type", "g5.xlarge", "--nodes", "2", H100], "no all-reduce floor for it"),
        (["--instance-type", "p5.48xlarge", "--nodes", "0", H100], "--nodes 0"),
        (["--instance-type", "p5.48xlarge", "--nodes", str(10**20), H100], "spans 1 to 65531 nodes"),
        (["--instance-type", "p5.48xlarge", "--nodes", "2", "/nonexistent/out.txt"], "/nonexistent/out.txt"),
    ],
)
def test_bad_input_exits_2_naming_the_flag_or_file(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "report", *argv]) == 2
    error = capsys.readouterr().err
    assert message in error and "Fix:" in error and "Traceback" not in error


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "1e999", "0.5", "86401", "1e300"])
def test_validate_timeout_is_bounded(timeout: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Checked before the stack is read: the stack folder need not exist.
    assert main(["validate", "/nonexistent/stack", "--stack", "dev", "--timeout", timeout]) == 2
    error = capsys.readouterr().err
    assert f"--timeout {float(timeout)}" in error and "from 1 " in error and "to 86400 (a day" in error
    assert "Traceback" not in error
