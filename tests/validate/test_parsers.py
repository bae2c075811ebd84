"""The nccl-tests and dcgmi parsers on published outputs (tests/fixtures/validate/README.md names each)."""

from __future__ import annotations

from pathlib import Path

from gpuforge.validate.dcgm import parse_diag
from gpuforge.validate.nccl import parse_nccl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
GIB = 1 << 30


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_a_complete_two_node_sweep_parses_every_size_with_in_place_figures() -> None:
    (run,) = parse_nccl(_text("nccl-h100-2node-gcp-a3mega.txt"))
    assert run.problems == []
    assert [row.bytes for row in run.rows] == run.expected_sizes == [8 << i for i in range(31)]
    assert run.busbw_at(GIB) == 298.82
    last = run.rows[-1]
    assert (last.bytes, last.algbw, last.busbw, last.wrong) == (8589934592, 179.92, 337.35, 0)


def test_srun_prefixed_rows_parse_and_a_missing_trailer_is_a_truncated_run() -> None:
    (run,) = parse_nccl(_text("nccl-p5-2node-aws-samples-excerpt.txt"))
    assert run.busbw_at(GIB) == 440.96
    assert len(run.rows) == 32
    assert run.problems == [
        "output ends before the summary line ('# Avg bus bandwidth'), after line 34: the run died before the "
        "end, or the file is cut"
    ]


def test_wrong_values_fail_the_run() -> None:
    # The published output with one in-place #wrong changed from 0 to 3: the format is real,
    # the count is the mutation under test (no public run with #wrong > 0 in this format was found).
    text = _text("nccl-h100-2node-gcp-a3mega.txt").replace(
        "6737.4  159.37  298.82      0", "6737.4  159.37  298.82      3"
    )
    (run,) = parse_nccl(text)
    assert run.problems == ["line 51: #wrong is 3 at 1073741824 bytes: the all-reduce returned wrong data"]


def test_an_unchecked_row_is_not_a_pass() -> None:
    # nccl-tests prints N/A in #wrong when run with -c 0 (src/util.cu, tag v2.17.6): the published
    # row with its in-place count replaced by N/A, the mutation under test.
    text = _text("nccl-h100-2node-gcp-a3mega.txt").replace(
        "6737.4  159.37  298.82      0", "6737.4  159.37  298.82    N/A"
    )
    (run,) = parse_nccl(text)
    assert run.problems == [
        "line 51: #wrong is N/A at 1073741824 bytes: the run did not check its results (nccl-tests -c 0); "
        "run all_reduce_perf with -c 1, as gpuforge validate does"
    ]


def test_a_size_the_header_promises_is_missing() -> None:
    lines = [
        line
        for line in _text("nccl-h100-2node-gcp-a3mega.txt").splitlines()
        if not line.lstrip().startswith("2147483648 ")
    ]
    (run,) = parse_nccl("\n".join(lines))
    assert run.problems == [
        "1 size(s) the header promises are missing, first 2147483648 bytes: the run stopped early"
    ]


def test_a_run_cut_mid_sweep_names_the_first_missing_size_and_the_missing_trailer() -> None:
    text = _text("nccl-h100-2node-gcp-a3mega.txt")
    cut = text[: text.index("   134217728")]
    (run,) = parse_nccl(cut)
    assert run.problems == [
        "7 size(s) the header promises are missing, first 134217728 bytes: the run stopped early",
        f"output ends before the summary line ('# Avg bus bandwidth'), after line {len(cut.splitlines())}: the "
        "run died before the end, or the file is cut",
    ]


def test_nccl_warn_lines_fail_the_run_and_are_quoted() -> None:
    (run,) = parse_nccl(_text("nccl-warn-aws-ofi-nccl-889.txt"))
    assert run.rows == []
    assert (
        run.problems[0]
        == "line 1: the run printed 'NCCL WARN NET/OFI GDR disabled on GDR-supported instance type p4d.24xlarge'"
    )
    assert run.problems[-1].startswith("no nccl-tests result row")
    assert sum("NCCL WARN" in problem for problem in run.problems) == 4


def test_garbage_is_no_result_not_a_pass() -> None:
    assert parse_nccl("Segmentation fault (core dumped)\n")[0].problems == [
        "no nccl-tests result row: this is not all_reduce_perf output, or the run died first"
    ]


def test_dcgm4_per_gpu_table_passes() -> None:
    run = parse_diag(_text("dcgm-4.4.2-r2-pass.txt"))
    assert [(test.category, test.name, test.result) for test in run.tests] == [
        ("Deployment", "software", "Pass"),
        ("Hardware", "memory", "Pass"),
        ("Integration", "pcie", "Pass"),
    ]
    assert run.problems == []


def test_dcgm3_failures_name_the_test_the_gpu_and_dcgms_reason() -> None:
    run = parse_diag(_text("dcgm-3.3.1-r2-fail-excerpt.txt"))
    assert [(test.name, test.result, test.failed_gpus) for test in run.failures] == [
        ("GPU Memory", "Fail", {0}),
        ("Diagnostic", "Fail", set()),
        ("Targeted Stress", "Fail", set()),
    ]
    assert run.problems[0] == (
        "Hardware/GPU Memory: Fail on GPU 0 (GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors)"
    )
    # An excerpt: neither dcgmi's banner nor its closing border.
    assert any("banner" in problem for problem in run.problems)


def test_a_cut_dcgm_table_fails() -> None:
    text = _text("dcgm-4.4.2-r2-pass.txt")
    run = parse_diag(text[: text.index("+-----  Integration")])
    assert run.problems == ["the table has no closing border: dcgmi died before the end, or the file is cut"]


def test_a_gpu_failing_in_the_dcgm4_form_is_named() -> None:
    text = _text("dcgm-4.4.2-r2-pass.txt").replace(
        "| memory                    | Pass                                           |\n|                           | GPU0: Pass",
        "| memory                    | Fail                                           |\n|                           | GPU0: Fail",
    )
    run = parse_diag(text)
    assert run.problems == ["Hardware/memory: Fail on GPU 0"]
