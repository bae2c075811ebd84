"""The shipped stacks pass every mandatory rule; the "unpinned" variants fail with the right rule.

Each shipped stack (stacks/*/Pulumi.<stack>.yaml) runs its own program under the
mocks, as `gpuforge plan` runs it, against a catalog that records its matrix's AMI.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import ASG, LAUNCH_TEMPLATE, Images, cluster, edit, mandatory, record, verdicts

from gpuforge.components import GpuClusterSpec
from gpuforge.plan.run import load, run_stack
from gpuforge.policies.runner import run_policies
from gpuforge.stack_config import cluster_spec, load_stack_config, resolve_ami

STACKS = Path(__file__).resolve().parents[2] / "stacks"
SHIPPED = sorted(
    (path.parent, path.stem.removeprefix("Pulumi."))
    for path in STACKS.glob("*/Pulumi.*.yaml")
    if path.name != "Pulumi.yaml"
)


def test_stacks_are_shipped() -> None:
    assert SHIPPED, "no stacks under stacks/"


@pytest.mark.parametrize(("stack_dir", "stack"), SHIPPED, ids=[f"{d.name}/{s}" for d, s in SHIPPED])
def test_shipped_stack_passes_every_mandatory_rule(images: Images, stack_dir: Path, stack: str) -> None:
    run = run_stack(load(stack_dir, stack, images.catalog))
    found = run_policies(run.resources, images.config())
    assert mandatory(found) == [], [f"{v.policy}: {v.message}" for v in mandatory(found)]


def _p5_prod(images: Images) -> GpuClusterSpec:
    config = load_stack_config(STACKS / "training", "p5-prod")
    config = config.model_copy(update={"catalog_path": images.catalog})
    return cluster_spec(config, resolve_ami(config))


def _unknown_ami(images: Images) -> GpuClusterSpec:
    base = _p5_prod(images)
    return base.model_copy(update={"ami": base.ami.model_copy(update={"ami_id": "ami-0fedcba9876543210"})})


def _broken_matrix(images: Images) -> GpuClusterSpec:
    return _p5_prod(images).model_copy(update={"ami": images.pins["p5-h100-broken"]})


def _on_demand(images: Images) -> GpuClusterSpec:
    return GpuClusterSpec.model_validate({**_p5_prod(images).model_dump(), "capacity": {"type": "on-demand"}})


UNPINNED: dict[
    str, tuple[Callable[[Images], GpuClusterSpec], list[pulumi.ResourceTransformation], str, str]
] = {
    "ami-not-in-catalog": (_unknown_ami, [], "ami-pinned", "is not in the image catalog"),
    "matrix-fails-check": (_broken_matrix, [], "ami-pinned", "fails `gpuforge matrix check`"),
    "p5-one-efa": (
        _p5_prod,
        [edit(LAUNCH_TEMPLATE, network_interfaces=lambda current: current[:2])],
        "efa-network-interfaces",
        "takes one EFA on each of its 32 EFA cards",
    ),
    "on-demand-no-group": (
        _on_demand,
        [edit(ASG, placement_group=None)],
        "efa-placement",
        "without a placement group",
    ),
    "imdsv1": (
        _p5_prod,
        [
            edit(
                LAUNCH_TEMPLATE,
                metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(http_tokens="optional"),
            )
        ],
        "imdsv2-required",
        "http_tokens is 'optional'",
    ),
}


@pytest.mark.parametrize("case", sorted(UNPINNED))
def test_unpinned_stack_fails_with_the_right_rule(images: Images, case: str) -> None:
    make_spec, transformations, policy, message = UNPINNED[case]
    resources = record(cluster(make_spec(images), *transformations))
    failures = mandatory(verdicts(resources, images))
    assert {v.policy for v in failures} == {policy}
    assert all(message in v.message and "Fix:" in v.message for v in failures)
    # The nodes fail; where the AMI is at fault, so does the Slurm controller, which boots the same AMI.
    failing = sorted(resource.name for resource in resources if resource.urn in {v.urn for v in failures})
    nodes = [name for name in failing if name.startswith("p5-prod-nodes")]
    assert len(nodes) == 1
    assert failing == sorted([*nodes, *(["p5-prod-slurm-instance"] if policy == "ami-pinned" else [])])
