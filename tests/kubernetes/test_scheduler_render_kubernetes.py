"""`gpuforge scheduler render` of a Kubernetes stack: its objects written whole, re-rendered in place,
refused beside foreign files, Slurm flags refused; a Slurm stack still gets its Slurm files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_schemas import validate
from kube_support import KUBERNETES_VERSIONS

from gpuforge.cli import main

STACKS = Path(__file__).resolve().parents[2] / "stacks" / "training"


def _render(out: Path, *extra: str, stack: str = "p5-eks") -> int:
    return main(["scheduler", "render", str(STACKS), "--stack", stack, "--out", str(out), *extra])


def test_render_writes_schema_valid_objects_of_the_stack(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    assert _render(out) == 0
    topology = yaml.safe_load((out / "topology" / "p5-eks-network.yaml").read_text())
    assert len(topology["spec"]["levels"]) == 3 + 1  # p5.48xlarge: 3 network-node layers, then the host
    flavor = yaml.safe_load((out / "resourceflavor" / "p5-eks-gpu.yaml").read_text())
    assert flavor["spec"]["topologyName"] == "p5-eks-network"
    index = yaml.safe_load((out / "index.yaml").read_text())
    assert index["cluster"] == "p5-eks" and index["addons"]["kueue"]["rendered"] is True
    # The stack's teams: one ClusterQueue each, with its gpuQuota of nvidia.com/gpu.
    queue = yaml.safe_load((out / "clusterqueue" / "llm.yaml").read_text())
    quotas = [
        resource["nominalQuota"]
        for group in queue["spec"]["resourceGroups"]
        for flavor_quota in group["flavors"]
        for resource in flavor_quota["resources"]
        if resource["name"] == "nvidia.com/gpu"
    ]
    assert quotas == [96]
    assert not (out / "slurm.conf").exists()
    for path in out.rglob("*.yaml"):
        relative = path.relative_to(out).as_posix()
        assert path.read_text().startswith(f"# gpuforge scheduler render: {relative} for cluster p5-eks\n")
        if relative != "index.yaml" and not relative.startswith("addons/"):
            validate(yaml.safe_load(path.read_text()), KUBERNETES_VERSIONS[-1])


def test_render_of_a_slurm_stack_still_writes_slurm_files(tmp_path: Path) -> None:
    assert _render(tmp_path, stack="p5-prod") == 0
    assert (tmp_path / "slurm.conf").is_file() and not (tmp_path / "index.yaml").exists()


@pytest.mark.parametrize("flag", [["--slurm-version", "25.05.3"], ["--topology", "t.json"]])
def test_render_refuses_slurm_flags_for_a_kubernetes_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    assert _render(tmp_path / "k8s", *flag) == 2
    err = capsys.readouterr().err
    assert f"{flag[0]}: stack p5-eks" in err and "scheduler.type = 'kubernetes'" in err and "Fix:" in err
    assert not (tmp_path / "k8s").exists()


def test_render_replaces_its_own_earlier_render(tmp_path: Path) -> None:
    assert _render(tmp_path) == 0
    stale = tmp_path / "clusterqueue" / "gone.yaml"
    stale.write_text("# gpuforge scheduler render: clusterqueue/gone.yaml for cluster p5-eks\n")
    assert _render(tmp_path) == 0
    assert not stale.exists()


def test_render_refuses_a_folder_with_foreign_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.yaml").write_text("kind: ConfigMap\n")
    assert _render(tmp_path) == 2
    assert "did not render for cluster p5-eks" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine.yaml"]


def test_kubernetes_render_is_not_a_second_command(capsys: pytest.CaptureFixture[str]) -> None:
    """One command renders a stack's scheduler, whichever it is."""
    with pytest.raises(SystemExit) as exited:
        main(["kubernetes", "render", str(STACKS), "--stack", "p5-eks", "--out", "x"])
    assert exited.value.code == 2
