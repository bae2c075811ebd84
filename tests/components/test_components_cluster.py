"""GpuCluster as a whole: its outputs, its summary, the resource tree, and config parsing."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from components_helpers import AMI, ASG, FSX, LAUNCH_TEMPLATE, cluster_spec, one, run

from gpuforge import hardware
from gpuforge.components import GpuCluster, GpuClusterSpec, LustreSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

TOKENS = {
    "gpuforge:cluster:GpuCluster",
    "gpuforge:network:ClusterNetwork",
    "gpuforge:placement:Placement",
    "gpuforge:storage:DataBucket",
    "gpuforge:storage:LustreStorage",
    "gpuforge:nodes:GpuNodeGroup",
}


def deploy(spec: GpuClusterSpec) -> dict[str, Any]:
    names = (
        "placement_group",
        "subnet_id",
        "security_group_id",
        "launch_template_id",
        "node_group",
        "file_system_dns_name",
        "file_system_mount_name",
        "bucket",
        "summary",
    )

    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("train", spec)

        def check(summary: dict[str, Any]) -> dict[str, Any]:
            json.dumps(summary)  # plain JSON-able data, ready for `pulumi stack output`
            assert summary["gpus_total"] == summary["nodes"] * summary["gpus_per_node"]
            return summary

        return pulumi.Output.all(
            *(getattr(cluster, name) for name in names[:-1]), cluster.summary.apply(check)
        )

    return dict(zip(names, run(build), strict=True))


def test_outputs_and_summary(mocks: GpuforgeMocks) -> None:
    lustre = LustreSpec(deployment_type="PERSISTENT_2", storage_capacity_gib=4800, throughput_per_tib=500)
    out = deploy(cluster_spec(name="train", node_count=4, lustre=lustre))
    assert out["launch_template_id"] == one(mocks, LAUNCH_TEMPLATE).id
    assert out["node_group"] == one(mocks, ASG).outputs["name"]
    assert out["file_system_dns_name"] == one(mocks, FSX).outputs["dnsName"]
    assert out["file_system_mount_name"] == one(mocks, FSX).outputs["mountName"]
    assert out["bucket"] == one(mocks, "aws:s3/bucket:Bucket").outputs["bucket"]
    assert out["subnet_id"] == one(mocks, "aws:ec2/subnet:Subnet").id
    summary = out["summary"]
    assert {key: summary[key] for key in ("nodes", "gpus_per_node", "gpus_total", "gpu_model")} == {
        "nodes": 4,
        "gpus_per_node": 8,
        "gpus_total": 32,
        "gpu_model": "H100",
    }
    assert (summary["efa_interfaces_per_node"], summary["efa_interfaces_max"]) == (32, 32)
    assert summary["network_performance"] == "3200 Gigabit"
    assert (summary["scratch_disks_per_node"], summary["scratch_per_node_gb"]) == (8, 30400)
    assert summary["lustre"]["throughput_mbps"] == 2400
    assert summary["placement"]["group"] == out["placement_group"]
    assert summary["ami"] == {
        "id": AMI.ami_id,
        "region": AMI.region,
        "matrix_name": AMI.matrix_name,
        "matrix_version": AMI.matrix_version,
        "matrix_digest": AMI.matrix_digest,
    }
    assert summary["capacity"]["type"] == "on-demand"


def test_network_performance_is_awss_string_not_a_per_card_sum(mocks: GpuforgeMocks) -> None:
    out = deploy(cluster_spec(name="train", instance_type="p6-b200.48xlarge"))
    row = hardware.get("p6-b200.48xlarge")
    per_card_sum = sum(card.baseline_gbps for card in row.network_cards)
    assert out["summary"]["network_performance"] == "3200 Gigabit" == row.network_performance
    assert per_card_sum != 3200, "the per-card baselines do not add up to AWS's figure"
    assert (out["summary"]["efa_interfaces_per_node"], out["summary"]["efa_interfaces_max"]) == (8, 8)


def test_resource_tree(mocks: GpuforgeMocks) -> None:
    lustre = LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200)
    deploy(cluster_spec(name="train", lustre=lustre))
    components = [r for r in mocks.resources if r.is_component]
    assert {r.type for r in components} == TOKENS
    by_urn = {r.urn: r for r in mocks.resources}
    (root,) = [r for r in mocks.resources if r.parent_urn not in by_urn]
    assert (root.type, root.name) == ("gpuforge:cluster:GpuCluster", "train")
    for resource in mocks.resources:
        if resource is root:
            continue
        parent = by_urn[resource.parent_urn]
        # Children are parented to their component and named after it.
        assert parent.is_component
        assert resource.name.startswith(f"{parent.name}-"), (resource.name, parent.name)
    assert [d for d, r in mocks.walk() if r is root] == [0]
    depth = {r.name: d for d, r in mocks.walk()}
    assert depth["train-nodes"] == 1 and depth["train-nodes-lt"] == 2


def test_every_resource_carries_the_cluster_tag(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(name="train", tags={"team": "llm"}))
    for resource in mocks.resources:
        tags = resource.inputs.get("tags")
        if isinstance(tags, dict):
            assert tags.get("gpuforge:cluster") == "train" and tags.get("team") == "llm", resource.name
    template = one(mocks, LAUNCH_TEMPLATE).inputs
    assert template["tags"]["gpuforge:matrix-digest"] == AMI.matrix_digest


def test_scratch_1_without_a_link_is_refused_not_left_unlinked(mocks: GpuforgeMocks) -> None:
    """SCRATCH_1 cannot take a DRA; the cluster used to drop the S3 link without a word (and the
    mandatory fsx-s3-link policy then refused the stack). Now the spec is refused, with the fix."""
    spec = cluster_spec(
        name="train", lustre=LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=1200)
    )
    with pytest.raises(
        InputError, match=r"lustre.deployment_type = 'SCRATCH_1': .* cannot take one.*Fix: use SCRATCH_2"
    ):
        GpuCluster("train", spec)
    assert mocks.resources == ()


def test_scratch_1_with_its_legacy_import_path_is_linked(mocks: GpuforgeMocks) -> None:
    lustre = LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=1200, import_path="s3://data/train")
    out = deploy(cluster_spec(name="train", lustre=lustre))
    assert mocks.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation") == []
    assert out["summary"]["lustre"]["s3_link"] == "import_path"


def test_a_spec_of_the_wrong_type_is_refused(mocks: GpuforgeMocks) -> None:
    with pytest.raises(InputError, match=r"GpuCluster 'x': spec is a dict, not a GpuClusterSpec"):
        GpuCluster("x", {"name": "x"})  # type: ignore[arg-type]
    assert mocks.resources == ()


def test_from_config_reports_every_problem_as_input_error() -> None:
    with pytest.raises(InputError) as caught:
        GpuClusterSpec.from_config({"name": "train", "instance_type": "p5.48xlarge", "node_count": "many"})
    message = str(caught.value)
    assert "GpuClusterSpec.node_count = 'many'" in message
    assert "GpuClusterSpec.availability_zone = " in message and "GpuClusterSpec.ami = " in message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"availability_zone": "us-west-2a"},
            r"availability_zone = 'us-west-2a': the zone is in us-west-2, not in the AMI's region 'us-east-1'",
        ),
        ({"name": "Train"}, r"name = 'Train': a cluster name is"),
        ({"tags": {"aws:owner": "x"}}, r"tags = 'aws:owner'"),
        ({"tags": {"gpuforge:cluster": "x"}}, r"set by gpuforge"),
        ({"wait_for_capacity_timeout": "ten minutes"}, r"wait_for_capacity_timeout = 'ten minutes'"),
        ({"node_count": 0}, r"GpuClusterSpec\.node_count = 0"),
        ({"imds_hop_limit": 3}, r"GpuClusterSpec\.imds_hop_limit = 3"),
    ],
)
def test_spec_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        cluster_spec(**overrides)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ami_id": "ami-123"}, r"ami\.ami_id = 'ami-123': an AMI id is 'ami-' followed by 8 or 17"),
        ({"ami_id": "ami-0123456789ABCDEF0"}, r"ami\.ami_id = 'ami-0123456789ABCDEF0'"),
        ({"matrix_digest": "abc"}, r"ami\.matrix_digest = 'abc'"),
        ({"region": "mars-1"}, r"ami\.region = 'mars-1'"),
    ],
)
def test_ami_refusals(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        AMI.model_validate({**AMI.model_dump(), **values})


def test_short_ami_ids_are_accepted() -> None:
    assert AMI.model_validate({**AMI.model_dump(), "ami_id": "ami-0a1b2c3d"}).ami_id == "ami-0a1b2c3d"
