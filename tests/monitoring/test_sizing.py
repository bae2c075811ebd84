"""The sizing estimate of `gpuforge monitoring render`: series counted from the rendered files and the
catalog, memory from the benchmark's measured figures, and a verdict a person can act on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import moto
import pytest
from monitoring_support import REPO, SHIPPED_STACKS, StackMaker

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.images.matrix import load_valid
from gpuforge.monitoring.sizing import (
    FITS,
    REMOTE_WRITE,
    TOO_SMALL,
    UNKNOWN,
    estimate,
    load_sizing,
    max_nodes,
    memory_bytes,
)
from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS
from gpuforge.stack_config import load_stack_config

P5 = hardware.get("p5.48xlarge")
MIB = 2**20


def test_controller_memory_rows_are_awss_own() -> None:
    """Every row of controller_memory_mib is DescribeInstanceTypes' MemoryInfo as moto ships it."""
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        described = json.load(handle)
    for name, mib in load_sizing().controller_memory_mib.items():
        assert described[name]["MemoryInfo"]["SizeInMiB"] == mib, name


def test_the_measured_figures_name_their_run_on_the_pinned_prometheus() -> None:
    """The figures were measured on the Prometheus release the image matrices pin (the one the
    controller runs); a new pin needs a new run of the benchmark."""
    pinned = {
        load_valid(path)[0].prometheus for path in sorted((REPO / "images" / "matrices").glob("*.yaml"))
    }
    versions = {pin.version for pin in pinned if pin is not None}
    assert len(versions) == 1, versions
    sizing = load_sizing()
    assert "benchmarks/prometheus_bench.py" in sizing.source
    assert f"Prometheus {versions.pop()} " in sizing.source
    assert sizing.bytes_per_series > 0 and sizing.node_exporter_series > 0


@pytest.mark.parametrize("stack", ["p5-prod", "p6-b200-reserved"])
def test_sizing_json_counts_what_the_render_writes(stack: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", stack, "--out", str(out)]) == 0
    config = load_stack_config(SHIPPED_STACKS, stack)
    instance = hardware.get(config.instance_type)
    data = load_sizing()
    sizing = json.loads((out / "sizing.json").read_text(encoding="utf-8"))
    csv = (out / "dcgm-exporter-fields.csv").read_text(encoding="utf-8").splitlines()
    fields = [line for line in csv if line and not line.startswith("#")]
    assert sizing["series_per_node"] == {
        "dcgm": instance.gpu_count * len(fields),
        "efa": instance.max_efa_interfaces * len(KERNEL_PORT_COUNTERS),
        "node_exporter": round(
            data.node_exporter_series + data.node_exporter_series_per_cpu * instance.vcpus
        ),
        "scrape": 2 * data.scrape_series_per_target,
        "slurm": data.slurm_series_per_node,  # every shipped matrix pins a Slurm that serves its metrics
    }
    assert sizing["nodes"] == config.node_count
    assert (
        sizing["series"]
        == config.node_count * sum(sizing["series_per_node"].values()) + data.slurm_series_fixed
    )
    assert sizing["prometheus_memory_mib"] == round(memory_bytes(sizing["series"], data) / MIB)
    assert sizing["controller"] == config.scheduler.controller_instance_type
    assert sizing["verdict"] == FITS  # the shipped clusters are small beside their controllers


def test_max_nodes_is_the_boundary_of_fits() -> None:
    for controller in ("m7i.xlarge", "m7i.2xlarge", "r7i.8xlarge"):
        most = max_nodes(P5, controller)
        assert most > 0
        fits = estimate(P5, nodes=most, controller=controller, slurm_metrics=True, remote_write=False)
        over = estimate(P5, nodes=most + 1, controller=controller, slurm_metrics=True, remote_write=False)
        assert fits.verdict == FITS, fits.advice
        assert over.verdict != FITS, over.advice


def test_a_small_controller_is_named_with_the_type_that_fits() -> None:
    data = load_sizing()
    nodes = max_nodes(P5, "m7i.xlarge") + 1
    result = estimate(P5, nodes=nodes, controller="m7i.xlarge", slurm_metrics=True, remote_write=False)
    assert result.verdict == TOO_SMALL
    smallest = min(
        (mib, name)
        for name, mib in data.controller_memory_mib.items()
        if result.memory_bytes <= mib * MIB * data.memory_fraction
    )
    assert f"controllerInstanceType to {smallest[1]}" in result.advice and "Fix:" in result.advice


def test_a_cluster_no_controller_holds_is_told_to_remote_write() -> None:
    largest = max(load_sizing().controller_memory_mib.items(), key=lambda row: row[1])[0]
    nodes = max_nodes(P5, largest) + 1
    plain = estimate(P5, nodes=nodes, controller="m7i.2xlarge", slurm_metrics=True, remote_write=False)
    assert plain.verdict == REMOTE_WRITE
    assert "gpuforge:monitoring.remoteWrite" in plain.advice
    written = estimate(P5, nodes=nodes, controller="m7i.2xlarge", slurm_metrics=True, remote_write=True)
    assert written.verdict == REMOTE_WRITE and "(remoteWrite is set)" in written.advice


def test_a_cluster_too_big_for_the_controller_s_memory_is_said_so_and_still_rendered(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One day of retention fits the controller's 80 GiB for Prometheus, so the memory binds first here:
    # the verdict is advice (the render is still written), naming the controller and the memory.
    nodes = max_nodes(P5, "m7i.xlarge") + 1
    assert estimate(
        P5, nodes=nodes, controller="m7i.xlarge", slurm_metrics=True, remote_write=False
    ).verdict == (TOO_SMALL)
    folder = make_stack(
        **{
            "gpuforge:nodeCount": nodes,
            "gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m7i.xlarge"},
            "gpuforge:monitoring": {"retentionDays": 1},
        }
    )
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"sizing: {TOO_SMALL}" in printed and "m7i.xlarge" in printed
    assert (out / "sizing.json").is_file()


def test_a_cluster_whose_history_does_not_fit_the_disk_is_refused(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # At the default 15 days the disk binds first (a series takes 11,520 bytes of disk a day).
    nodes = max_nodes(P5, "m7i.xlarge") + 1
    folder = make_stack(
        **{
            "gpuforge:nodeCount": nodes,
            "gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m7i.xlarge"},
        }
    )
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "gpuforge:monitoring.retentionDays = 15" in err and "days fit" in err and "Fix:" in err
    assert not out.exists()


def test_a_controller_without_a_memory_row_is_said_so(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_stack(**{"gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m6i.2xlarge"}})
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert f"sizing: {UNKNOWN}: gpuforge does not know m6i.2xlarge's memory" in printed


def test_disk_bytes_follow_prometheus_s_storage_formula() -> None:
    from gpuforge.monitoring.sizing import disk_bytes, retention_problem

    # 1,000 series every 15 s: 5,760 samples a day each, 2 bytes a sample.
    assert disk_bytes(1000, retention_days=1, scrape_interval_s=15) == 1000 * 5760 * 2
    assert disk_bytes(1000, retention_days=10, scrape_interval_s=30) == 1000 * 2880 * 2 * 10
    assert (
        retention_problem(1000, retention_days=10, scrape_interval_s=15, disk_gib=1, where="the disk") is None
    )
    problem = retention_problem(
        100_000, retention_days=30, scrape_interval_s=15, disk_gib=20, where="the disk"
    )
    assert (
        problem is not None
        and "at most 18 days fit" in problem
        and "more than the 20 GiB the disk" in problem
    )
