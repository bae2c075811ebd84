"""A team quota above the cluster's GPUs today is advice in `gpuforge plan`, never a refusal: quotas are budgets,
and a stack scaled down keeps its teams as written. The advice comes from the cluster summary (GpuCluster), so
`pulumi up` exports the same lines the plan prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_support import StackCopy

from gpuforge.cli import main


def test_scaling_a_stack_down_plans_with_advice_for_each_team_above_it(
    capsys: pytest.CaptureFixture[str], catalog_path: Path, stack_copy: StackCopy
) -> None:
    # p5-prod's teams: llm 96 and vision 32 GPUs; 4 nodes hold 32 GPUs.
    stack = stack_copy(overrides={"gpuforge:nodeCount": 4})
    args = ["plan", str(stack), "--stack", "p5-prod", "--catalog", str(catalog_path)]
    assert main(args) == 0
    text = capsys.readouterr().out
    advice = (
        "team llm: gpuQuota 96 is above the cluster's 32 GPUs today (nodeCount 4 x 8 GPUs per node), so it "
        "does not limit the team until nodeCount reaches 12; kept as written (a quota is a budget)"
    )
    assert f"  advice     {advice}" in text.splitlines(), text
    assert "team vision" not in text  # 32 of 32 GPUs binds today

    assert main([*args, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["summary"]["advice"] == [advice]


def test_a_stack_whose_quotas_fit_has_no_advice(
    capsys: pytest.CaptureFixture[str], catalog_path: Path, stack_copy: StackCopy
) -> None:
    stack = stack_copy()
    assert main(["plan", str(stack), "--stack", "p5-prod", "--catalog", str(catalog_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["advice"] == []
