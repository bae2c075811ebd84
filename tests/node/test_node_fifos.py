"""The node agent never blocks on a FIFO, nor reads through a link, where others could put one.

Each call below reads or writes a path in a folder of the node (/run, /var/lib, sysfs below a
chosen root); a FIFO there blocked it before (an open for reading waits for a writer, one for
writing for a reader), so a job's prolog held the job's start, and the boot gate the node's join.
Every read now goes through gpuforge.loading.read_bytes (non-blocking open, fstat, bounded, links
refused where others write), every write through gpuforge.atomic. `returns_despite_fifos` turns a
hang into a failure (tests/node/fifo.py).
"""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest
from fifo import make_fifo, returns_despite_fifos
from node_scenarios import install_commands, p5_healthy
from test_node_efa_metrics import P4D_DEVICES, Topo, fake_sysfs, samples

from gpuforge.cli import build_parser
from gpuforge.node import cli as node_cli
from gpuforge.node.context import HostPaths
from gpuforge.node.efa_metrics import collect
from gpuforge.node.job_mapping import run_epilog, run_prolog
from gpuforge.node.slurm import DrainRecord


def is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(path.lstat().st_mode)


def test_a_fifo_or_a_link_in_the_mapping_folder_never_blocks_the_prolog(tmp_path: Path) -> None:
    mapping = tmp_path / "map"
    fifo = make_fifo(mapping / "3")
    elsewhere = make_fifo(tmp_path / "elsewhere" / "pipe")
    (mapping / "4").symlink_to(elsewhere)
    secret = tmp_path / "elsewhere" / "secret"
    secret.write_text("untouched\n")
    (mapping / "5").symlink_to(secret)
    logged: list[str] = []
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "3,4,5,6"}
    code = returns_despite_fifos(
        lambda: run_prolog(mapping, env, logged.append), [fifo, elsewhere], what="the prolog"
    )
    assert code == 0
    assert (mapping / "6").read_text() == "7\n"  # the job's other GPU is mapped
    assert is_fifo(fifo) and (mapping / "4").is_symlink() and (mapping / "5").is_symlink()
    assert secret.read_text() == "untouched\n"
    assert any(f"{mapping / '3'}: cannot write the file: it is a FIFO" in line for line in logged), logged
    assert any(f"{mapping / '5'}: cannot write the file: it is a symbolic link" in line for line in logged)
    (mapping / "6").write_text("7\n")
    code = returns_despite_fifos(
        lambda: run_epilog(mapping, env, logged.append), [fifo, elsewhere], what="the epilog"
    )
    assert code == 0
    assert sorted(path.name for path in mapping.iterdir()) == ["3", "4", "5"]  # only the job's own file went


def test_a_fifo_or_a_link_among_the_counters_or_as_the_layout_cache_never_blocks(tmp_path: Path) -> None:
    infiniband = fake_sysfs(tmp_path, P4D_DEVICES[:1], ("tx_bytes",))
    counters = infiniband / P4D_DEVICES[0] / "ports/1/hw_counters"
    fifo = make_fifo(counters / "rx_bytes")
    outside = tmp_path / "outside"
    outside.write_text("12345\n")
    (counters / "rx_pkts").symlink_to(outside)
    cache = make_fifo(tmp_path / "layout.json")
    topo = Topo("p4d-a100.txt")
    logged: list[str] = []
    text = returns_despite_fifos(
        lambda: collect(infiniband, tmp_path / "map", cache, topo, logged.append),
        [fifo, cache],
        what="the EFA collector",
    )
    assert [(row["name"], row["gpus"]) for row in samples(text)] == [("gpuforge_efa_tx_bytes_total", "0,1")]
    assert topo.calls == 1  # the cache was not trusted: the layout came from nvidia-smi
    assert any(f"cannot read {fifo}: not a regular file" in line for line in logged), logged
    assert any(f"cannot read {counters / 'rx_pkts'}: " in line for line in logged), logged
    assert any("layout not cached" in line and "a FIFO" in line for line in logged), logged


def test_a_fifo_as_the_drain_record_reads_as_an_unreadable_record(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "var/lib/gpuforge/slurm-drain.json")
    record = returns_despite_fifos(lambda: DrainRecord.load(fifo), [fifo], what="reading the drain record")
    assert record == DrainRecord(
        node="", reason="", reported=False
    )  # so Slurm is asked, as for any bad record


def test_a_fifo_in_place_of_a_kernel_file_reads_as_absent(tmp_path: Path) -> None:
    paths = HostPaths(tmp_path)
    fifo = make_fifo(paths.mdstat)
    assert returns_despite_fifos(lambda: paths.read(fifo), [fifo], what="reading a kernel file") is None


def test_a_fifo_as_the_boot_marker_never_blocks_the_boot_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = p5_healthy()
    root = scenario.write_root(tmp_path / "root")
    monkeypatch.setenv("PATH", str(install_commands(scenario, tmp_path / "bin")))
    marker = make_fifo(HostPaths(root).boot_pass_marker)
    parsed: argparse.Namespace = build_parser("node").parse_args(["node", "check", "--expect", "p5.48xlarge"])
    parsed.manifest = Path(__file__).resolve().parents[1] / "fixtures/node/manifest/p5-h100.json"
    code = returns_despite_fifos(
        lambda: node_cli.handle_check(parsed, paths=HostPaths(root)), [marker], what="the boot gate"
    )
    assert code == 0
    assert is_fifo(marker)
    assert f"could not write {marker}" in capsys.readouterr().err
