"""`gpuforge kubernetes render`: a shipped stack's objects written whole, re-rendered in place, refused beside foreign files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import KUBERNETES_VERSIONS
from k8s_schemas import validate

from gpuforge.cli import main

STACKS = Path(__file__).resolve().parents[2] / "stacks" / "training"


def _render(out: Path) -> int:
    return main(["kubernetes", "render", str(STACKS), "--stack", "p5-prod", "--out", str(out)])


def test_render_writes_schema_valid_objects_of_the_stack(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    assert _render(out) == 0
    topology = yaml.safe_load((out / "topology" / "p5-prod-network.yaml").read_text())
    assert len(topology["spec"]["levels"]) == 3 + 1  # p5.48xlarge: 3 network-node layers, then the host
    flavor = yaml.safe_load((out / "resourceflavor" / "p5-prod-gpu.yaml").read_text())
    assert flavor["spec"]["topologyName"] == "p5-prod-network"
    index = yaml.safe_load((out / "index.yaml").read_text())
    assert index["cluster"] == "p5-prod" and index["addons"]["kueue"]["rendered"] is True
    for path in out.rglob("*.yaml"):
        relative = path.relative_to(out).as_posix()
        assert path.read_text().startswith(f"# gpuforge kubernetes render: {relative} for cluster p5-prod\n")
        if relative != "index.yaml" and not relative.startswith("addons/"):
            validate(yaml.safe_load(path.read_text()), KUBERNETES_VERSIONS[-1])


def test_render_replaces_its_own_earlier_render(tmp_path: Path) -> None:
    assert _render(tmp_path) == 0
    stale = tmp_path / "clusterqueue" / "gone.yaml"
    stale.write_text("# gpuforge kubernetes render: clusterqueue/gone.yaml for cluster p5-prod\n")
    assert _render(tmp_path) == 0
    assert not stale.exists()


def test_render_refuses_a_folder_with_foreign_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.yaml").write_text("kind: ConfigMap\n")
    assert _render(tmp_path) == 2
    assert "did not render for cluster p5-prod" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine.yaml"]
