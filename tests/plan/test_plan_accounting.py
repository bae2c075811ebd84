"""`gpuforge plan` says where Slurm's accounting lives: MariaDB on the controller's state volume, or Aurora.

Stand-in until issue 22's renderer lands (`rendered_slurmdbd_conf`): its password-less slurmdbd.conf among the
files the controller gets (a no-op once the renderer writes one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from plan_support import STACK_DIR, StackCopy

from gpuforge.cli import main
from gpuforge.components import slurm_controller
from gpuforge.plan.render import summary_lines
from gpuforge.plan.stack_plan import plan


@pytest.fixture
def rendered_slurmdbd_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    render = slurm_controller.render_files
    monkeypatch.setattr(
        slurm_controller,
        "render_files",
        lambda cluster: {"slurmdbd.conf": "SlurmUser=slurm\n", **render(cluster)},
    )


def test_p5_prod_plans_mariadb_on_the_controller_s_state_volume(
    catalog_path: Path, rendered_slurmdbd_conf: None
) -> None:
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    assert result.summary["accounting"] == {
        "database": "local",
        "engine_version": None,
        "endpoint": None,
        "state_volume_gib": 20,
    }
    assert (
        "  accounting slurmdbd with MariaDB on the controller's encrypted state volume "
        "(20 GiB, shared with slurmctld's state)"
    ) in summary_lines(result.summary)
    assert not [
        r for r in result.run.resources if r.type.startswith("aws:rds/")
    ]  # nothing managed by default


def test_the_summary_follows_the_rendered_files(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    """No slurmdbd.conf among the files the controller gets: no slurmdbd runs, and the summary says so."""
    code = main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    rendered = "slurmdbd.conf" in document["scheduler"]["files"]
    assert document["summary"]["accounting"]["database"] == ("local" if rendered else None)


def test_p5_prod_with_aurora_plans_the_database_and_passes_the_pack(
    catalog_path: Path, stack_copy: StackCopy, rendered_slurmdbd_conf: None
) -> None:
    scheduler = yaml.safe_load((STACK_DIR / "Pulumi.p5-prod.yaml").read_text(encoding="utf-8"))["config"][
        "gpuforge:scheduler"
    ]
    stack = stack_copy(overrides={"gpuforge:scheduler": {**scheduler, "accounting": {"database": "aurora"}}})
    result = plan(stack, "p5-prod", catalog=catalog_path)
    named = {(r.type, r.name) for r in result.run.resources}
    assert {
        ("aws:rds/cluster:Cluster", "p5-prod-slurm-accounting-cluster"),
        ("aws:rds/clusterInstance:ClusterInstance", "p5-prod-slurm-accounting-writer"),
        ("aws:rds/subnetGroup:SubnetGroup", "p5-prod-slurm-accounting-subnets"),
        ("aws:rds/clusterParameterGroup:ClusterParameterGroup", "p5-prod-slurm-accounting-params"),
        ("aws:ec2/subnet:Subnet", "p5-prod-slurm-accounting-subnet"),
    } <= named
    accounting = result.summary["accounting"]
    assert accounting["database"] == "aurora" and accounting["engine_version"] == "8.0.mysql_aurora.3.10.5"
    assert accounting["endpoint"].endswith(".rds.amazonaws.com")
    assert result.mandatory_failures == ()
    line = next(line for line in summary_lines(result.summary) if line.startswith("  accounting "))
    assert line.startswith(
        f"  accounting slurmdbd with Aurora MySQL Serverless v2 8.0.mysql_aurora.3.10.5 at {accounting['endpoint']} "
    )


def test_a_capacity_block_fee_set_in_the_stack_is_in_the_capacity_summary(
    catalog_path: Path, stack_copy: StackCopy
) -> None:
    capacity = yaml.safe_load((STACK_DIR / "Pulumi.p5-prod.yaml").read_text(encoding="utf-8"))["config"][
        "gpuforge:capacity"
    ]
    stack = stack_copy(overrides={"gpuforge:capacity": {**capacity, "upfrontFeeUsd": 123456.78}})
    result = plan(stack, "p5-prod", catalog=catalog_path)
    assert result.summary["capacity"]["upfront_fee_usd"] == 123456.78
    line = next(line for line in summary_lines(result.summary) if line.startswith("  capacity "))
    assert line.endswith("; upfront fee $123,456.78 (gpuforge:capacity.upfrontFeeUsd)"), line
    # Without the key: no fee in the summary, and `gpuforge usage` says it has no price.
    unset = {**result.summary, "capacity": {**result.summary["capacity"], "upfront_fee_usd": None}}
    line = next(line for line in summary_lines(unset) if line.startswith("  capacity "))
    assert "fee" not in line


def test_the_plan_summary_shows_p5_prod_s_teams_and_qos(catalog_path: Path) -> None:
    from gpuforge.plan.render import render_text

    text = render_text(plan(STACK_DIR, "p5-prod", catalog=catalog_path)).splitlines()
    assert (
        "  teams      llm 96 GPUs, QOS production (default), research, users alice, bob; "
        "vision 32 GPUs, QOS research (default), users carol, bob"
    ) in text
    assert (
        "  QOS        production priority 1000, preempts research (requeued, not killed); research priority 100, "
        "300 s grace when preempted"
    ) in text


def test_a_team_without_qos_runs_under_slurm_s_normal_and_no_teams_means_no_lines(
    catalog_path: Path, stack_copy: StackCopy
) -> None:
    from gpuforge.plan.render import team_lines

    scheduler = yaml.safe_load((STACK_DIR / "Pulumi.p5-prod.yaml").read_text(encoding="utf-8"))["config"][
        "gpuforge:scheduler"
    ]
    bare = {key: value for key, value in scheduler.items() if key not in ("teams", "qos")}
    teams = [{"name": "ml", "users": ["dana"], "gpuQuota": 8}]
    stack = stack_copy(overrides={"gpuforge:scheduler": {**bare, "teams": teams}})
    config = plan(stack, "p5-prod", catalog=catalog_path).config
    assert team_lines(config) == ["  teams      ml 8 GPUs, QOS normal (Slurm's default), users dana"]
    stack = stack_copy(overrides={"gpuforge:scheduler": bare})
    assert team_lines(plan(stack, "p5-prod", catalog=catalog_path).config) == []
