"""`gpuforge scheduler render --out DIR`: checked whole before a file is written; one cluster's set only.

The rule (gpuforge/rendered_set.py): DIR is new, empty, or holds this cluster's earlier
render, which is replaced whole (a file the new render does not produce is removed);
anything else stops the render with exit 2 and nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.cli import main

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "images/matrices/p5-h100-cuda12.yaml"
SET = [
    "cgroup.conf",
    "gpuforge-accounts.json",
    "gres.conf",
    "slurm.conf",
    "slurmd-register.conf",
    "slurmdbd.conf",
    "topology.conf",
]


def _stack(folder: Path, stack: str, instance_type: str = "p5.48xlarge") -> Path:
    config: dict[str, Any] = {
        "aws:region": "us-east-1",
        "gpuforge:matrix": str(MATRIX),
        "gpuforge:instanceType": instance_type,
        "gpuforge:nodeCount": 2,
        "gpuforge:nodeMode": "asg",
        "gpuforge:availabilityZone": "us-east-1a",
        "gpuforge:capacity": {"type": "on-demand"},
        "gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return folder


def _render(stack_dir: Path, stack: str, out: Path) -> int:
    return main(["scheduler", "render", str(stack_dir), "--stack", stack, "--out", str(out)])


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def test_a_second_render_of_the_cluster_replaces_its_set_and_drops_what_it_no_longer_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert _render(_stack(tmp_path / "p5", "train"), "train", out) == 0
    assert _names(out) == SET
    # The same cluster, now of a type AWS reports no topology for: topology.conf must not stay behind.
    assert _render(_stack(tmp_path / "g6", "train", "g6.xlarge"), "train", out) == 0
    assert _names(out) == [name for name in SET if name != "topology.conf"]
    assert "TopologyPlugin" not in (out / "slurm.conf").read_text(encoding="utf-8")
    assert f"removed {out / 'topology.conf'}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("notes.txt", "not gpuforge's"),
        ("slurm.conf", "ClusterName=hand-written\n"),
        ("gres.conf", "# gres.conf for cluster other, rendered by gpuforge for Slurm 26.05.5.\n"),
        (".slurm.conf.abc123.tmp", "left by a crash"),
    ],
)
def test_a_folder_holding_files_gpuforge_did_not_render_for_this_cluster_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text(content, encoding="utf-8")
    before = _snapshot(out)
    assert _render(_stack(tmp_path / "stack", "train"), "train", out) == 2
    error = capsys.readouterr().err
    assert repr(name) in error and "did not render for cluster train" in error and "Fix:" in error
    assert _snapshot(out) == before


def test_another_cluster_s_render_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _render(_stack(tmp_path / "a", "cluster-a"), "cluster-a", out) == 0
    before = _snapshot(out)
    assert _render(_stack(tmp_path / "b", "cluster-b"), "cluster-b", out) == 2
    assert "did not render for cluster cluster-b" in capsys.readouterr().err
    assert _snapshot(out) == before


def test_a_folder_where_one_file_of_the_set_cannot_be_written_gets_none_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "gres.conf").mkdir(parents=True)  # slurm.conf would be written, then gres.conf fail
    assert _render(_stack(tmp_path / "stack", "train"), "train", out) == 2
    assert "'gres.conf'" in capsys.readouterr().err
    assert _names(out) == ["gres.conf"]


@pytest.mark.parametrize("kind", ["file", "file-as-parent"])
def test_an_out_that_is_not_a_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me", encoding="utf-8")
    out = blocker if kind == "file" else blocker / "sub" / "out"
    assert _render(_stack(tmp_path / "stack", "train"), "train", out) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert blocker.read_text(encoding="utf-8") == "keep me"
