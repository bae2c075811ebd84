"""Every shipped stack plans: its real program, its real config, under the SDK's mocks, with the policy pack."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_support import REPO, SHIPPED_STACKS, STACK_DIR, StackCopy

from gpuforge import hardware
from gpuforge.errors import InputError
from gpuforge.images.catalog import Catalog
from gpuforge.images.matrix import load_valid
from gpuforge.plan.stack_plan import plan, policy_config
from gpuforge.policies.runner import run_policies
from gpuforge.stack_config import load_stack_config


def test_the_issue_s_three_stacks_are_shipped() -> None:
    assert {"dev", "p5-prod"} <= set(SHIPPED_STACKS)
    reserved = [name for name in SHIPPED_STACKS if name not in ("dev", "p5-prod", "p5-eks")]
    assert reserved, "a stack for p5en or p6-b200 on a capacity reservation"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_plans_without_error(stack: str, catalog_path: Path, catalog: Catalog) -> None:
    config = load_stack_config(STACK_DIR, stack)
    result = plan(STACK_DIR, stack, catalog=catalog_path)

    assert result.mandatory_failures == ()
    summary = result.summary
    instance = hardware.get(config.instance_type)
    assert summary["nodes"] == config.node_count
    assert summary["gpus_total"] == config.node_count * instance.gpu_count
    assert summary["efa_interfaces_per_node"] == instance.max_efa_interfaces
    _, digest = load_valid(config.matrix_path)
    entry = catalog.lookup(digest, config.region)
    assert entry is not None
    assert summary["ami"]["id"] == entry.ami_id
    assert summary["ami"]["matrix_digest"] == digest
    # The AMI reached the nodes' launch template, as the engine would receive it.
    templates = result.run.mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert [template.inputs["imageId"] for template in templates] == [entry.ami_id]
    clusters = result.run.mocks.of_type("gpuforge:cluster:GpuCluster")
    assert [cluster.name for cluster in clusters] == [stack]


def test_dev_is_one_or_two_single_gpu_nodes_on_demand_with_scratch_2(catalog_path: Path) -> None:
    summary = plan(STACK_DIR, "dev", catalog=catalog_path).summary
    assert 1 <= summary["nodes"] <= 2
    assert summary["gpus_per_node"] == 1
    assert summary["capacity"]["type"] == "on-demand"
    assert summary["lustre"]["deployment_type"] == "SCRATCH_2"


def test_p5_prod_is_16_p5_on_a_capacity_block_without_placement_group_and_persistent_2_with_a_dra(
    catalog_path: Path,
) -> None:
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    summary = result.summary
    assert (summary["nodes"], summary["instance_type"]) == (16, "p5.48xlarge")
    assert summary["capacity"]["type"] == "capacity-block"
    assert summary["placement"]["group"] is None
    assert result.run.mocks.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert summary["lustre"]["deployment_type"] == "PERSISTENT_2"
    assert summary["lustre"]["s3_link"] == "dra"
    assert len(result.run.mocks.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")) == 1


def test_the_reserved_stack_is_p5en_or_p6_b200_on_a_capacity_reservation(catalog_path: Path) -> None:
    (reserved,) = [name for name in SHIPPED_STACKS if name not in ("dev", "p5-prod", "p5-eks")]
    summary = plan(STACK_DIR, reserved, catalog=catalog_path).summary
    assert summary["instance_type"] in ("p5en.48xlarge", "p6-b200.48xlarge")
    assert summary["capacity"]["type"] == "reservation"


def test_a_matrix_without_a_catalog_entry_fails_with_the_named_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    empty = tmp_path / "empty-catalog.json"
    empty.write_text('{"schema": 2, "images": {}}\n', encoding="utf-8")  # empty; a missing one is an error
    with pytest.raises(InputError) as caught:
        plan(STACK_DIR, "p5-prod", catalog=empty)
    message = caught.value.message
    assert caught.value.exit_code == 2
    assert "has no AMI for matrix p5-h100-cuda12 1.0.0" in message
    assert "in region us-east-1" in message
    assert "`gpuforge image build images/matrices/p5-h100-cuda12.yaml --region us-east-1`" in message


def test_the_missing_entry_error_names_the_local_build_for_the_local_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuforge.images.catalog

    # Where `image build --local` records its AMIs; moved here so the checkout's own stays untouched.
    local = tmp_path / "catalog.local.json"
    local.write_text('{"schema": 2, "images": {}}\n', encoding="utf-8")  # empty; a missing one is an error
    monkeypatch.setattr(gpuforge.images.catalog, "LOCAL_CATALOG", local)
    monkeypatch.chdir(REPO)
    with pytest.raises(
        InputError,
        match=r"`gpuforge image build images/matrices/p5-h100-cuda12.yaml --region us-east-1 --local`",
    ):
        plan(STACK_DIR, "p5-prod", catalog=local)


def test_catalog_override_replaces_the_config_s_catalog(
    stack_copy: StackCopy, tmp_path: Path, catalog_path: Path
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"schema": 2, "images": {}}\n', encoding="utf-8")  # empty; a missing one is an error
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:catalog": str(empty)})
    with pytest.raises(InputError, match="has no AMI"):
        plan(stack_dir, "p5-prod")
    assert plan(stack_dir, "p5-prod", catalog=catalog_path).mandatory_failures == ()


def test_plan_tells_ami_pinned_the_stack_s_region(catalog_path: Path) -> None:
    # The same config `policy check` gives ami-pinned: the resources of a stack planned for its own
    # region pass, and the same resources judged for a region the catalog has no record for do not.
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    config = load_stack_config(STACK_DIR, "p5-prod")
    assert policy_config(catalog_path, config.region)["ami-pinned"]["region"] == config.region
    assert not [v for v in result.verdicts if v.policy == "ami-pinned"]
    elsewhere = run_policies(result.run.resources, policy_config(catalog_path, "eu-north-1"))
    assert [v.policy for v in elsewhere if v.policy == "ami-pinned"], (
        "an AMI catalogued only for the stack's region"
    )
