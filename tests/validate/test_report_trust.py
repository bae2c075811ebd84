"""`validate report` stands behind every PASS (issue 20, item 6).

Every input here is a published output from tests/fixtures/validate (README.md there names each
source), or such an output edited in the test to make the case no public output shows; each edit
is said beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.validate.dcgm import parse_diag
from gpuforge.validate.nccl import parse_nccl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
H100_TEXT = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
DIAG_PASS_TEXT = (FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_text(encoding="utf-8")
# The published run's 1 GiB row (tests/fixtures/validate/nccl-h100-2node-gcp-a3mega.txt, line 51).
ROW_1GIB = "  1073741824     268435456     float     sum      -1   6759.0  158.86  297.86      0"
TRAILER = "# Out of bounds values"
# p4d.24xlarge: 8 GPUs per node, the published H100 run (16 ranks on 2 hosts) clears its 2-node floor.
P4D = ["--instance-type", "p4d.24xlarge"]


def _report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *argv: str
) -> tuple[int, dict[str, object]]:
    path = tmp_path / "out.txt"
    path.write_text(text, encoding="utf-8")
    code = main(["validate", "report", *(argv or (*P4D, "--nodes", "2")), str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _problems(data: dict[str, object]) -> list[str]:
    return [problem for item in data["nccl"] for problem in item["problems"]]  # type: ignore[attr-defined]


def test_the_published_run_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _report(tmp_path, capsys, H100_TEXT)
    assert (code, data["verdict"], _problems(data)) == (0, "pass", [])


def test_every_run_in_a_file_is_judged_and_a_failing_second_run_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The published output twice (a job that ran the test twice); the second copy's 1 GiB in-place
    # #wrong edited from 0 to 3.
    second = H100_TEXT.replace(
        ROW_1GIB + "   6737.4  159.37  298.82      0", ROW_1GIB + "   6737.4  159.37  298.82      3"
    )
    assert second != H100_TEXT
    code, data = _report(tmp_path, capsys, H100_TEXT + second)
    assert code == 1 and data["verdict"] == "fail"
    first, other = data["nccl"]  # type: ignore[misc]
    start = H100_TEXT.count("\n") + 1
    assert (first["line"], first["verdict"]) == (1, "pass")
    assert (other["line"], other["verdict"]) == (start, "fail")
    assert other["problems"] == [
        f"line {start + 50}: #wrong is 3 at 1073741824 bytes: the all-reduce returned wrong data"
    ]


def test_a_sweep_restarting_without_a_header_is_a_second_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The published rows repeated after the first run's trailer, without a header: cut after the 8 B row.
    rows = [line for line in H100_TEXT.splitlines() if line.startswith("           8 ")]
    code, data = _report(tmp_path, capsys, H100_TEXT + "\n".join(rows) + "\n")
    assert code == 1 and len(data["nccl"]) == 2  # type: ignore[arg-type]
    assert any("output ends before the summary line" in problem for problem in _problems(data))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # An 8 GiB+ row appended before the trailer, cut after its root column (a cut write).
        (
            "  17179869184    4294967296     float     sum      -1",
            "5 columns where all_reduce_perf prints 13",
        ),
        # The 1 GiB row with its in-place busbw replaced: NaN, infinity, negative, two decimal points.
        (ROW_1GIB + "   6737.4  159.37     nan      0", "in-place busbw 'nan' is not a finite number"),
        (ROW_1GIB + "   6737.4  159.37     inf      0", "in-place busbw 'inf' is not a finite number"),
        (ROW_1GIB + "   6737.4  159.37 -298.82      0", "in-place busbw '-298.82' is negative"),
        (ROW_1GIB + "   6737.4  159.37  2.9.82      0", "in-place busbw '2.9.82' is not a number"),
        (ROW_1GIB + "   6737.4  159.37  298.82     -1", "#wrong '-1' is negative"),
        (ROW_1GIB.replace("float", "quad") + "    6737.4  159.37  298.82      0", "type 'quad' is not one"),
    ],
)
def test_a_row_that_cannot_be_read_is_a_failure_naming_its_line(
    row: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = H100_TEXT.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(TRAILER))
    lines.insert(at, row)
    code, data = _report(tmp_path, capsys, "\n".join(lines) + "\n")
    assert code == 1
    assert any(
        problem.startswith(f"line {at + 1}: unreadable row, {message}") for problem in _problems(data)
    ), _problems(data)


def test_a_mixed_file_is_judged_as_dcgmi_and_as_nccl_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A job's log holding both: the published passing diag, then the published all-reduce with the
    # 1 GiB in-place #wrong edited to 3.
    bad = H100_TEXT.replace(
        ROW_1GIB + "   6737.4  159.37  298.82      0", ROW_1GIB + "   6737.4  159.37  298.82      3"
    )
    code, data = _report(tmp_path, capsys, DIAG_PASS_TEXT + bad)
    assert code == 1
    assert data["diag"][0]["verdict"] == "pass"  # type: ignore[index]
    assert data["nccl"][0]["verdict"] == "fail"  # type: ignore[index]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # nccl-tests 2.17.6 names its binary in the header (src/util.cu writeDeviceReport); the
        # published output predates that line, so the line is added as 2.17.6 prints it.
        (
            lambda text: "# Collective test starting: all_gather_perf\n" + text,
            "line 1: the output is of all_gather_perf, not all_reduce_perf",
        ),
        # all_gather prints redop 'none' (src/all_gather.cu): the published rows so edited.
        (lambda text: text.replace("     sum  ", "    none  "), "not an all-reduce row (redop 'none'"),
        # reduce_scatter prints the count per rank, a 16th of the size over 16 ranks
        # (src/reduce_scatter.cu ReduceScatterGetCollByteCount): the 1 GiB row so edited.
        (
            lambda text: text.replace(ROW_1GIB, ROW_1GIB.replace("268435456", " 16777216")),
            "16777216 x 4-byte float",
        ),
    ],
)
def test_another_collective_is_refused_for_the_all_reduce_floor(
    edit: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = _report(tmp_path, capsys, edit(H100_TEXT))  # type: ignore[operator]
    assert code == 1
    assert any(message in problem for problem in _problems(data)), _problems(data)


@pytest.mark.parametrize(
    ("instance", "nodes", "edit", "message"),
    [
        # 16 ranks on 2 hosts judged as a 4-node run (whose looser floor the run would clear).
        (
            "p4d.24xlarge",
            "4",
            str,
            "the run's ranks are on 2 host(s) (ztan-mig-235z, ztan-mig-gq73), not the 4 of --nodes",
        ),
        # The last rank's line removed: 15 ranks where 2 nodes of 8 GPUs run 16.
        (
            "p4d.24xlarge",
            "2",
            lambda text: "\n".join(line for line in text.splitlines() if "Rank 15 " not in line) + "\n",
            "the run has 15 rank(s), not 16 (2 node(s) x 8 GPUs of the type)",
        ),
        # No rank list at all (the header cut off).
        (
            "p4d.24xlarge",
            "2",
            lambda text: "\n".join(line for line in text.splitlines() if " Rank " not in line) + "\n",
            "the run lists no ranks",
        ),
        # Every rank moved onto one host: the published 16 ranks as if on one node.
        ("p4d.24xlarge", "2", lambda text: text.replace("ztan-mig-gq73", "ztan-mig-235z"), "on 1 host(s)"),
    ],
)
def test_the_ranks_and_hosts_must_agree_with_nodes(
    instance: str,
    nodes: str,
    edit: object,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, data = _report(tmp_path, capsys, edit(H100_TEXT), "--instance-type", instance, "--nodes", nodes)  # type: ignore[operator]
    assert code == 1
    assert any(message in problem for problem in _problems(data)), _problems(data)


def test_dcgmi_rows_that_cannot_be_read_name_their_line() -> None:
    # The published passing table with the memory test's result replaced by a word dcgmi does not print.
    text = DIAG_PASS_TEXT.replace(
        "| memory                    | Pass ", "| memory                    | Okay "
    )
    run = parse_diag(text)
    assert (
        "line 13: test 'memory' has no result dcgmi prints (Pass, Fail, Warn, Skip, Not Run): 'Okay'"
        in run.problems
    )
    # ... and a row of three columns.
    run = parse_diag(DIAG_PASS_TEXT.replace("| pcie                      |", "| pcie | x |"))
    assert any(problem.startswith("line 16: not a row of dcgmi's table") for problem in run.problems)


def test_long_lines_parse_in_linear_time() -> None:
    # A 40 KB line took 18 s and a 300 KB file never ended; these must simply finish (the time is
    # printed by benchmarks/validate_parse_bench.py, not asserted). The published table with one
    # row padded to 40 KB without its closing '|', then 300 KB of such rows.
    padded = "| a" + " " * 20_000 + "| b" + " " * 20_000
    assert "not a row of dcgmi's table" in parse_diag(DIAG_PASS_TEXT + padded).problems[0]
    assert len(parse_diag(DIAG_PASS_TEXT + (padded + "\n") * 8).problems) >= 8
    assert parse_nccl(H100_TEXT + "8" + " 1" * 150_000 + "\n")[0].problems


# Hostile files, each derived from a published output in the test (or made of no output at all):
# (bytes or a folder, the exit code, what the message or the verdict must say).
HOSTILE: list[tuple[str, bytes | None, int, str]] = [
    ("binary junk", bytes(range(256)) * 64, 2, "not UTF-8 text (byte 128 is b'\\x80')"),
    ("non-UTF-8 text", H100_TEXT.replace("ztan", "z\u00e9tan").encode("latin-1"), 2, "not UTF-8 text"),
    ("a directory", None, 2, "not a regular file (a directory, device or pipe)"),
    ("an empty file", b"", 1, "no nccl-tests result row"),
    ("NUL bytes", b"\0" * 4096, 1, "no nccl-tests result row"),
    ("one 8 MB line", b"8 " * 4_000_000, 1, "unreadable row"),
    ("one 8 MB table line", b"| a" + b" " * 8_000_000, 1, "not a row of dcgmi's table"),
    ("CR line endings", H100_TEXT.replace("\n", "\r").encode(), 0, "verdict: PASS"),
    ("CRLF line endings", H100_TEXT.replace("\n", "\r\n").encode(), 0, "verdict: PASS"),
    (
        "the published run cut mid-row",
        H100_TEXT[: H100_TEXT.index(ROW_1GIB) + 40].encode(),
        1,
        "unreadable row",
    ),
]


@pytest.mark.parametrize(("name", "data", "code", "message"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_files_get_a_clear_answer_never_a_traceback(
    name: str, data: bytes | None, code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.txt"
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    assert main(["validate", "report", *P4D, "--nodes", "2", str(path)]) == code, name
    captured = capsys.readouterr()
    assert message in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err
    if code == 2:
        assert str(path) in captured.err and "Fix:" in captured.err


def test_every_dcgmi_diagnostic_in_a_file_is_judged() -> None:
    # The published passing table twice (a job that ran the diag twice), the first cut before its
    # Integration category: the second, whole, table must not hide the first's cut.
    first = DIAG_PASS_TEXT[: DIAG_PASS_TEXT.index("+-----  Integration")]
    run = parse_diag(first + DIAG_PASS_TEXT)
    start = first.count("\n") + 1
    assert run.problems == [
        f"line {start}: a diagnostic begins before the table above it closed: that dcgmi died or was cut"
    ]
    assert parse_diag(DIAG_PASS_TEXT + DIAG_PASS_TEXT).problems == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # The published header lines, each cut short (the mutation under test).
        ("minBytes 8 maxBytes 8589934592 step: 2(factor)", "minBytes 8 maxBytes"),
        ("#  Rank 15 Group  0 Pid   6740 on ztan-mig-gq73 device  7", "#  Rank 15 Group  0 Pid"),
    ],
)
def test_a_header_line_that_cannot_be_read_fails_naming_its_line(old: str, new: str) -> None:
    assert old in H100_TEXT
    (run,) = parse_nccl(H100_TEXT.replace(old, new))
    assert any(
        problem.startswith("line ") and "unreadable header line" in problem for problem in run.problems
    )
