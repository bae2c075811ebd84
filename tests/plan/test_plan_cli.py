"""`gpuforge plan` through the real CLI entry point: the JSON contract, the text view, the exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plan_support import STACK_DIR, StackCopy

from gpuforge.cli import main

TOP_KEYS = [
    "stack",
    "matrix",
    "ami",
    "image",
    "resources",
    "summary",
    "policies",
    "scheduler",
    "checkpoint",
    "preemption",
    "kubernetes",
]
RESOURCE_KEYS = ["urn", "type", "name", "parent", "inputs"]
VERDICT_KEYS = ["policy", "enforcement", "urn", "message"]

# Appended to the real program: an instance booting an AMI that no catalog records.
ROGUE_INSTANCE = """
import pulumi_aws as rogue_aws

rogue_aws.ec2.Instance("rogue", ami="ami-0000000000000000a", instance_type="t3.micro")
"""


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys: pytest.CaptureFixture[str], stack_dir: Path, stack: str, catalog: Path) -> tuple[int, Any]:
    code, out, _ = _plan(capsys, str(stack_dir), "--stack", stack, "--catalog", str(catalog), "--json")
    return code, json.loads(out)


def test_json_shape_is_stable(capsys: pytest.CaptureFixture[str], catalog_path: Path) -> None:
    code, document = _json(capsys, STACK_DIR, "p5-prod", catalog_path)
    assert code == 0
    assert list(document) == TOP_KEYS
    assert document["stack"] == "p5-prod"
    assert list(document["matrix"]) == ["path", "digest"]
    assert document["matrix"]["path"] == str(
        (STACK_DIR / "../../images/matrices/p5-h100-cuda12.yaml").resolve()
    )
    assert document["ami"] == document["summary"]["ami"]["id"] and document["ami"].startswith("ami-")
    assert document["image"] == {"region": "us-east-1", "catalog": str(catalog_path.resolve())}
    assert document["matrix"]["digest"] == document["summary"]["ami"]["matrix_digest"]
    assert document["policies"] == []

    resources = document["resources"]
    assert resources, "the plan registered resources"
    assert all(list(resource) == RESOURCE_KEYS for resource in resources)
    urns = [resource["urn"] for resource in resources]
    assert urns == sorted(urns)
    stack_urn = "urn:pulumi:p5-prod::gpuforge-training::pulumi:pulumi:Stack::gpuforge-training-p5-prod"
    assert {resource["parent"] for resource in resources} <= {*urns, stack_urn}
    # Inputs as the engine receives them: camelCased names, numbers as floats.
    (asg,) = [resource for resource in resources if resource["type"] == "aws:autoscaling/group:Group"]
    assert asg["inputs"]["maxSize"] == 16.0
    assert "launchTemplate" in asg["inputs"]


def test_the_same_stack_gives_the_same_document(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    _, first = _json(capsys, STACK_DIR, "p5-prod", catalog_path)
    _, second = _json(capsys, STACK_DIR, "p5-prod", catalog_path)
    assert first == second


def test_text_shows_tree_matrix_ami_summary_and_verdicts(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code, out, _ = _plan(capsys, str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert code == 0
    assert "Matrix    " in out and "p5-h100-cuda12 1.0.0" in out
    assert (
        "  pulumi:pulumi:Stack  gpuforge-training-p5-prod\n  └─ gpuforge:cluster:GpuCluster  p5-prod" in out
    )
    assert "├─ aws:ec2/launchTemplate:LaunchTemplate  p5-prod-nodes-lt" in out
    assert "  nodes      16 x p5.48xlarge as an Auto Scaling group" in out
    assert "  GPUs       128 x NVIDIA H100 (8 per node)" in out
    assert "  EFA        32 of 32 interfaces per node, network 3200 Gigabit" in out
    assert "  Lustre     PERSISTENT_2, 24000 GiB" in out
    assert "Policies\n  no violations" in out
    assert out.rstrip().endswith("Result: OK")


def test_a_mandatory_violation_exits_1_and_is_reported(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path
) -> None:
    stack_dir = stack_copy("p5-prod", program_suffix=ROGUE_INSTANCE)
    code, document = _json(capsys, stack_dir, "p5-prod", catalog_path)
    assert code == 1
    mandatory = [verdict for verdict in document["policies"] if verdict["enforcement"] == "mandatory"]
    assert mandatory
    assert all(list(verdict) == VERDICT_KEYS for verdict in document["policies"])
    assert any(
        verdict["policy"] == "ami-pinned" and verdict["urn"].endswith("aws:ec2/instance:Instance::rogue")
        for verdict in mandatory
    )

    code, out, _ = _plan(capsys, str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert code == 1
    assert "MANDATORY ami-pinned on aws:ec2/instance:Instance rogue" in out
    assert "Result: FAIL" in out


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"gpuforge:nodeCnt": 4}, "gpuforge:nodeCnt"),
        ({"gpuforge:nodeCount": "sixteen"}, "gpuforge:nodeCount"),
        (
            {"gpuforge:lustre": {"deploymentType": "PERSISTENT_2", "storageCapacityGiB": "lots"}},
            "storageCapacityGiB",
        ),
        ({"gpuforge:availabilityZone": None}, "gpuforge:availabilityZone"),
    ],
)
def test_bad_config_exits_2_naming_the_key_and_the_file(
    capsys: pytest.CaptureFixture[str],
    stack_copy: StackCopy,
    catalog_path: Path,
    overrides: dict[str, Any],
    key: str,
) -> None:
    stack_dir = stack_copy("p5-prod", overrides=overrides)
    code, out, err = _plan(capsys, str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert code == 2
    assert out == ""
    assert key in err
    assert str(stack_dir / "Pulumi.p5-prod.yaml") in err
    assert "Traceback" not in err


def test_an_unknown_stack_exits_2_listing_the_shipped_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _plan(capsys, str(STACK_DIR), "--stack", "prod")
    assert code == 2
    assert "Pulumi.prod.yaml: no such stack file" in err
    assert "p5-prod" in err


def test_an_instance_type_the_matrix_does_not_target_exits_2(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path
) -> None:
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:instanceType": "p6-b200.48xlarge"})
    code, out, err = _plan(capsys, str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert (code, out) == (2, "")
    assert "gpuforge:instanceType = 'p6-b200.48xlarge' is not a target of gpuforge:matrix" in err
    assert "p5.48xlarge, p5e.48xlarge, p5en.48xlarge" in err and "Traceback" not in err
