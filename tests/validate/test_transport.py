"""The transport NCCL chose, read from published NCCL_DEBUG=INFO logs (tests/fixtures/validate/nccl_logs/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan
from gpuforge.validate.transport import judge_transport, read_transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
LOGS = FIXTURES / "nccl_logs"
P4D = hardware.get("p4d.24xlarge")
P5EN = hardware.get("p5en.48xlarge")
G5 = hardware.get("g5.12xlarge")  # EFA, no GPUDirect RDMA (aws-ofi-nccl's platform table)


def _log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_a_healthy_p4d_run_over_efa_with_gdrdma_passes() -> None:
    verdict = judge_transport(_log("p4d-2node-efa-gdrdma-aws-efa-eks-excerpt.txt"), P4D, 2, required=True)
    assert verdict.judged and verdict.problems == ()
    seen = verdict.transport
    assert seen.networks == {"AWS Libfabric": 16} and seen.providers == {"efa": 16}
    assert seen.channels == seen.gdr_channels == 12


def test_the_current_plugin_name_and_provider_line_pass() -> None:
    # aws-ofi-nccl 1.14 calls itself "Libfabric" and adds "(found 16 nics)" to the provider line.
    verdict = judge_transport(_log("p5en-libfabric-efa-nccl-1597-excerpt.txt"), P5EN, 2, required=True)
    assert verdict.problems == ()
    assert verdict.transport.networks == {"Libfabric": 1} and verdict.transport.providers == {"efa": 1}


def test_a_fallback_to_sockets_fails_naming_the_network_and_the_causes() -> None:
    verdict = judge_transport(_log("socket-fallback-aws-do-eks-excerpt.txt"), P4D, 2, required=True)
    (problem,) = verdict.problems
    assert problem.startswith("NCCL used network 'Socket' on 1 rank(s), not EFA through aws-ofi-nccl")
    assert "LD_LIBRARY_PATH" in problem and "fi_info -p efa" in problem and "security group" in problem


def test_a_libfabric_provider_other_than_efa_fails() -> None:
    verdict = judge_transport(_log("provider-tcp-nccl-229-excerpt.txt"), P4D, 2, required=True)
    assert any(
        problem.startswith("aws-ofi-nccl selected libfabric provider 'tcp;ofi_rxm' on 2 rank(s), not 'efa'")
        and "FI_PROVIDER" in problem
        for problem in verdict.problems
    )


def test_network_channels_without_gdrdma_fail_where_the_type_has_it() -> None:
    text = _log("p4d-2node-no-gdrdma-aws-ofi-nccl-64-excerpt.txt")
    (problem,) = judge_transport(text, P4D, 2, required=False).problems
    assert problem.startswith(
        "2 of 2 network channel(s) run without GPUDirect RDMA (no /GDRDMA), which p4d.24xlarge has"
    )
    assert "FI_EFA_USE_DEVICE_RDMA=1" in problem
    # The same log on a type without GPUDirect RDMA is fine.
    assert judge_transport(text, G5, 2, required=False).problems == ()


def test_the_plugin_refusing_a_gdr_type_is_named() -> None:
    text = (FIXTURES / "nccl-warn-aws-ofi-nccl-889.txt").read_text(encoding="utf-8")
    problems = judge_transport(text, P4D, 2, required=False).problems
    assert any("GDR disabled on GDR-supported instance type p4d.24xlarge" in problem for problem in problems)


def test_a_single_node_run_is_never_failed_for_lacking_a_network() -> None:
    verdict = judge_transport(_log("socket-fallback-aws-do-eks-excerpt.txt"), P4D, 1, required=True)
    assert not verdict.judged and verdict.problems == () and "NVLink only" in verdict.note


def test_output_without_debug_lines_fails_a_run_that_asked_for_them_and_is_noted_for_saved_files() -> None:
    table = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
    assert not read_transport(table).seen
    assert "NCCL_DEBUG=INFO" in judge_transport(table, P4D, 2, required=True).problems[0]
    saved = judge_transport(table, P4D, 2, required=False)
    assert saved.problems == () and not saved.judged and "NCCL_DEBUG_SUBSYS=INIT,NET" in saved.note


def test_validate_report_fails_a_saved_socket_run_and_says_what_nccl_chose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    socket = str(LOGS / "socket-fallback-aws-do-eks-excerpt.txt")
    code = main(["validate", "report", "--instance-type", "g5.12xlarge", "--nodes", "2", socket, "--json"])
    item = json.loads(capsys.readouterr().out)["nccl"][0]
    assert code == 1
    assert item["transport"]["networks"] == {"Socket": 1} and item["transport"]["verdict"] == "fail"
    assert any(problem.startswith("NCCL used network 'Socket'") for problem in item["problems"])


def test_validate_report_text_view_shows_the_transport(capsys: pytest.CaptureFixture[str]) -> None:
    socket = str(LOGS / "socket-fallback-aws-do-eks-excerpt.txt")
    assert main(["validate", "report", "--instance-type", "g5.12xlarge", "--nodes", "2", socket]) == 1
    assert "  transport: networks Socket x1; providers none; FAIL" in capsys.readouterr().out


def test_validate_asks_nccl_for_its_transport_lines_in_one_srun_export_item() -> None:
    plan = Plan(("a", "b"), hardware.get("p5.48xlarge"), floors_for("p5.48xlarge"))
    (export,) = [arg for arg in plan.all_reduce(["a", "b"]) if arg.startswith("--export=")]
    # srun splits --export at commas outside quotes, so the comma in INIT,NET must sit in a quoted item.
    assert export == (
        '--export=ALL,FI_EFA_USE_DEVICE_RDMA=1,FI_PROVIDER=efa,NCCL_DEBUG=INFO,"NCCL_DEBUG_SUBSYS=INIT,NET"'
    )
    g5 = Plan(("a", "b"), G5, floors_for("g5.12xlarge"))
    assert "FI_EFA_USE_DEVICE_RDMA" not in " ".join(g5.all_reduce(["a", "b"]))  # no GPUDirect RDMA on g5
