"""`gpuforge monitoring render`: the set written whole for one cluster, or exit 2 and nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from monitoring_support import REPO, SHIPPED_STACKS, StackMaker

from gpuforge.cli import main
from gpuforge.images.matrix import load_valid

EXPECTED = {
    "prometheus.yml",
    "prometheus.flags",
    "alertmanager.yml",
    "rules/gpuforge-alerts.yml",
    "rules/gpuforge-usage.yml",
    "dcgm-exporter-fields.csv",
    "dashboards/gpuforge-usage.json",
    "dashboards/gpuforge-fabric.json",
    "dashboards/gpuforge-health.json",
    "sizing.json",
}


def _files(out: Path) -> set[str]:
    return {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()}


def test_render_writes_the_set_and_rewrites_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(out)]
    assert main(args) == 0
    assert _files(out) == EXPECTED
    # Retention is prometheus.yml's field; the flag is deprecated since Prometheus 3.8 (gpuforge.monitoring.prometheus).
    written = (out / "prometheus.yml").read_text(encoding="utf-8")
    assert "storage:\n  tsdb:\n    retention:\n      time: 15d\n" in written
    assert "retention" not in (out / "prometheus.flags").read_text(encoding="utf-8")
    assert main(args) == 0  # its own earlier render is replaced


def test_another_clusters_files_stop_the_render_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(out)]) == 0
    before = {name: (out / name).read_bytes() for name in EXPECTED}
    code = main(
        ["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p6-b200-reserved", "--out", str(out)]
    )
    assert code == 2
    assert "did not write" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in EXPECTED} == before


def test_a_stack_without_monitoring_is_exit_2_with_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", "dev", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "gpuforge:monitoring.enabled is false" in err and "Fix:" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"remoteWrite": "amp"}, "gpuforge:monitoring.remoteWrite = 'amp'"),
        ({"alerts": {"sns": "create"}}, "gpuforge:monitoring.alerts.sns = 'create'"),
        ({"retentionDays": -1}, "gpuforge:monitoring.retentionDays = -1"),
    ],
)
def test_what_cannot_render_offline_is_exit_2_naming_the_key(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str], block: object, named: str
) -> None:
    folder = make_stack(**{"gpuforge:monitoring": block})
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert named in err and "Fix:" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_workspace_gets_remote_write_with_sigv4(make_stack: StackMaker, tmp_path: Path) -> None:
    arn = "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
    folder = make_stack(**{"gpuforge:monitoring": {"remoteWrite": {"workspaceArn": arn}}})
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "prometheus.yml").read_text(encoding="utf-8")
    url = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef"
    assert f"url: {url}/api/v1/remote_write" in text
    assert "region: us-west-2" in text


@pytest.mark.parametrize(
    ("block", "offline"),
    [
        ({"remoteWrite": "amp"}, "`remoteWrite: {workspaceArn: arn:aws:aps:...}`"),
        ({"alerts": {"sns": "create"}}, "`alerts: {sns: arn:aws:sns:...}`"),
    ],
)
def test_a_made_workspace_or_topic_is_known_only_at_pulumi_up_and_the_cli_says_so(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str], block: object, offline: str
) -> None:
    folder = make_stack(**{"gpuforge:monitoring": block})
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "made by `pulumi up`, and its ARN is known only then" in err
    assert offline in err and "/etc/gpuforge/monitoring after `pulumi up`" in err
    assert "does not build yet" not in err
    assert not (tmp_path / "o").exists()


def test_retention_the_controller_disk_cannot_hold_is_exit_2_with_the_figures_and_the_fix(
    make_stack: StackMaker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_stack(**{"gpuforge:nodeCount": 16, "gpuforge:monitoring": {"retentionDays": 400}})
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "gpuforge:monitoring.retentionDays = 400" in err and "GiB" in err and "Fix:" in err
    assert not (tmp_path / "o").exists()


def test_the_rendered_files_name_only_the_pinned_prometheus_series(tmp_path: Path) -> None:
    """A Prometheus version named in a rendered config (a header, a comment) is the pinned release or
    its series: the configs are written for, and checked by, the Prometheus the image matrices pin.
    (sizing.json's measured source may name an earlier run; test_sizing checks it names the pin.)"""
    pinned = {
        load_valid(path)[0].prometheus for path in sorted((REPO / "images" / "matrices").glob("*.yaml"))
    }
    versions = {pin.version for pin in pinned if pin is not None}
    assert len(versions) == 1, versions
    parts = versions.pop().split(".")
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(out)]) == 0
    named = {
        (str(path.relative_to(out)), found)
        for path in [*out.rglob("*.yml"), out / "prometheus.flags"]
        for found in re.findall(r"Prometheus (\d+(?:\.\d+){0,2})\b", path.read_text(encoding="utf-8"))
    }
    assert named, "no rendered file names the Prometheus it is written for"
    assert {
        (name, found) for name, found in named if found.split(".") != parts[: found.count(".") + 1]
    } == set()
