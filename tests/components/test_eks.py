"""EKS under the Pulumi SDK's mocks (preview=False): the control plane, access entries, the system and GPU node groups.

What each assertion checks is the setting as the AWS provider receives it (camelCased inputs). The EKS facts
behind them are cited in components/eks_cluster.py and components/eks_nodes.py.
"""

from __future__ import annotations

import base64
import email
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from components_helpers import LAUNCH_TEMPLATE, NOW, cluster_spec, interface_triples, one, run

from gpuforge import hardware
from gpuforge.components import GpuCluster, eks_join
from gpuforge.components.eks_nodes import gpu_group_name
from gpuforge.components.specs import CapacitySpec, SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.kubernetes import kueue, node_agent
from gpuforge.pulumi_mocks import GpuforgeMocks

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
POLICY_ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
KMS_KEY = "aws:kms/key:Key"
ASG = "aws:autoscaling/group:Group"
ADMIN = "arn:aws:iam::123456789012:role/platform-admin"
RESERVATION = "cr-0123456789abcdef0"
BLOCK_END = datetime(2030, 3, 15, 11, 30, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def kubernetes(**overrides: Any) -> SchedulerSpec:
    values: dict[str, Any] = {
        "type": "kubernetes",
        "kubernetes_version": "1.35",
        "system_node_type": "m7i.xlarge",
        "admin_role_arn": ADMIN,
    }
    values.update(overrides)
    return SchedulerSpec(**values)


def block() -> CapacitySpec:
    return CapacitySpec(
        type="capacity-block",
        reservation_id=RESERVATION,
        start=datetime(2030, 3, 1, 11, 30, tzinfo=UTC),
        end=BLOCK_END,
    )


def deploy(**overrides: Any) -> dict[str, Any]:
    spec = cluster_spec(scheduler=kubernetes(), **overrides)

    def build() -> pulumi.Output[Any]:
        return GpuCluster("demo", spec, now=NOW).summary

    summary: dict[str, Any] = run(build)
    return summary


def gpu_group(mocks: GpuforgeMocks) -> Any:
    return next(group for group in mocks.of_type(NODE_GROUP) if group.name == "demo-nodes-group")


def parts(mocks: GpuforgeMocks) -> dict[str, str]:
    text = base64.b64decode(one(mocks, LAUNCH_TEMPLATE).inputs["userData"]).decode("utf-8")
    message = email.message_from_string(text)
    assert message.is_multipart()
    return {part.get_content_type(): str(part.get_payload()) for part in message.get_payload()}  # type: ignore[union-attr]


def test_control_plane_private_api_auth_kms_logs_exact_version(mocks: GpuforgeMocks) -> None:
    deploy()
    cluster = one(mocks, CLUSTER).inputs
    assert cluster["version"] == "1.35"
    assert cluster["name"] == "demo"
    vpc = cluster["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False
    assert vpc["endpointPrivateAccess"] is True
    assert len(vpc["subnetIds"]) == 2
    assert cluster["accessConfig"] == {
        "authenticationMode": "API",
        "bootstrapClusterCreatorAdminPermissions": False,
    }
    key = one(mocks, KMS_KEY)
    assert key.inputs["enableKeyRotation"] is True
    assert cluster["encryptionConfig"] == {
        "provider": {"keyArn": key.outputs["arn"]},
        "resources": ["secrets"],
    }
    assert cluster["enabledClusterLogTypes"] == [
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    ]
    # No aws-auth ConfigMap anywhere: nothing of the Kubernetes provider is made.
    assert not [r for r in mocks.resources if r.type.startswith("kubernetes:")]


def test_second_subnet_in_another_zone(mocks: GpuforgeMocks) -> None:
    deploy()
    subnet = mocks.named("demo-eks-subnet")
    assert subnet.inputs["cidrBlock"] == "10.0.255.0/24"
    assert subnet.inputs["availabilityZone"] != "us-east-1a"


def test_access_entries_admin_and_node_roles(mocks: GpuforgeMocks) -> None:
    deploy()
    entries = {entry.name: entry.inputs for entry in mocks.of_type(ACCESS_ENTRY)}
    assert entries["demo-eks-admin"]["principalArn"] == ADMIN
    assert entries["demo-eks-admin"]["type"] == "STANDARD"
    association = one(mocks, POLICY_ASSOCIATION).inputs
    assert association["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert association["accessScope"] == {"type": "cluster"}
    gpu_role = mocks.named("demo-nodes-role").outputs["arn"]
    assert entries["demo-nodes-access"] == {
        "clusterName": "demo",
        "principalArn": gpu_role,
        "type": "EC2_LINUX",
    }
    assert entries["demo-eks-system-nodes-access"]["type"] == "EC2_LINUX"
    group = gpu_group(mocks)
    assert group.inputs["nodeRoleArn"] == gpu_role
    assert any("demo-nodes-access" in str(dep) for dep in group.dependencies)


def test_system_node_group_is_small_cpu(mocks: GpuforgeMocks) -> None:
    deploy()
    system = mocks.named("demo-eks-system").inputs
    assert system["instanceTypes"] == ["m7i.xlarge"]
    assert system["capacityType"] == "ON_DEMAND"
    assert system["scalingConfig"] == {"desiredSize": 2, "maxSize": 2, "minSize": 2}


def test_gpu_nodes_on_demand_catalog_ami_every_efa_no_fallback(mocks: GpuforgeMocks) -> None:
    deploy()
    template = one(mocks, LAUNCH_TEMPLATE)
    assert template.inputs["imageId"] == "ami-0123456789abcdef0"
    assert len([t for t in interface_triples(template) if t[2] == "efa-only"]) == 32
    # EKS's launch-template rules: no subnet on the interfaces, no instance profile.
    assert all("subnetId" not in item for item in template.inputs["networkInterfaces"])
    assert "iamInstanceProfile" not in template.inputs
    cluster_sg = one(mocks, CLUSTER).outputs["vpcConfig"]["clusterSecurityGroupId"]
    assert all(cluster_sg in item["securityGroups"] for item in template.inputs["networkInterfaces"])
    assert template.inputs["placement"]["groupName"] == mocks.named("demo-placement-group").outputs["name"]
    group = gpu_group(mocks).inputs
    assert "amiType" not in group  # a custom AMI in the template: no amiType, so no other AMI
    assert "releaseVersion" not in group
    assert group["capacityType"] == "ON_DEMAND"
    assert group["launchTemplate"]["id"] == template.id
    assert group["scalingConfig"] == {"desiredSize": 2, "maxSize": 2, "minSize": 2}
    assert mocks.of_type(ASG) == []


def test_join_files_and_node_setup_in_user_data(mocks: GpuforgeMocks) -> None:
    deploy()
    found = parts(mocks)
    cloud = yaml.safe_load(found["text/cloud-config"])
    files = {item["path"]: item for item in cloud["write_files"]}
    assert set(files) == {
        eks_join.KUBECONFIG,
        eks_join.AGENT_KUBECONFIG,
        eks_join.KUBELET_CONFIG,
        eks_join.CA_FILE,
        eks_join.KUBELET_ENV,
    }
    assert files[eks_join.KUBECONFIG]["permissions"] == "0600"
    cluster = one(mocks, CLUSTER).outputs
    kubeconfig = yaml.safe_load(files[eks_join.KUBECONFIG]["content"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": cluster["endpoint"],
        "certificate-authority-data": cluster["certificateAuthority"]["data"],
    }
    assert kubeconfig["users"][0]["user"]["exec"]["args"] == ["token", "-i", "demo", "--region", "us-east-1"]
    kubelet = yaml.safe_load(files[eks_join.KUBELET_CONFIG]["content"])
    assert kubelet["clusterDNS"] == ["172.20.0.10"]
    assert kubelet["cgroupDriver"] == "systemd"
    assert files[eks_join.CA_FILE]["content"] == "mock CA of demo"
    env = files[eks_join.KUBELET_ENV]["content"]
    assert (
        "--node-labels=gpuforge.dev/efa=true,gpuforge.dev/gpu-instance-type=p5.48xlarge,"
        "gpuforge.dev/node-group=demo-gpu" in env
    )
    assert "--register-with-taints=nvidia.com/gpu=true:NoSchedule" in env
    script = found["text/x-shellscript"]
    assert "/scratch" in script and "gpuforge node check" in script
    assert "SLURMD_OPTIONS" not in script  # no Slurm join on an EKS node


def test_capacity_block_group_and_eks_scale_down_line(mocks: GpuforgeMocks) -> None:
    summary = deploy(node_count=2, capacity=block())
    template = one(mocks, LAUNCH_TEMPLATE).inputs
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }
    group = gpu_group(mocks)
    assert group.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert group.inputs["scalingConfig"] == {"desiredSize": 2, "maxSize": 2, "minSize": 0}
    line = summary["kubernetes"]["capacity_block_scale_down"]
    assert line.startswith("EKS scales the GPU node group to 0 at 2030-03-15T10:50:00+00:00 (40 minutes")


def test_summary_kubernetes(mocks: GpuforgeMocks) -> None:
    summary = deploy()
    assert summary["kubernetes"]["version"] == "1.35"
    assert summary["kubernetes"]["capacity_block_scale_down"] is None
    assert summary["scheduler"]["type"] == "kubernetes"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kubernetes_version": "1.33.2"}, r"scheduler\.kubernetesVersion = '1\.33\.2'"),
        ({"kubernetes_version": None}, r"scheduler\.kubernetesVersion = None"),
        ({"system_node_type": None}, r"scheduler\.systemNodeType = None"),
        ({"admin_role_arn": "arn:aws:iam::123456789012:user/me"}, r"scheduler\.adminRoleArn"),
        ({"controller_instance_type": "m7i.2xlarge"}, r"controllerInstanceType is not a key of a kubernetes"),
        ({"partitions": [{"name": "gpu"}]}, r"partitions is not a key of a kubernetes"),
    ],
)
def test_kubernetes_scheduler_rules(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        kubernetes(**overrides)


def test_kubernetes_keys_refused_on_slurm() -> None:
    with pytest.raises(InputError, match=r"kubernetesVersion is not a key of a slurm or none"):
        SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge", kubernetes_version="1.33")


def test_teams_and_qos_allowed_on_kubernetes() -> None:
    spec = kubernetes(
        qos=[
            {"name": "production", "priority": 100, "preempts": ["research"]},
            {"name": "research", "priority": 10},
        ],
        teams=[{"name": "llm", "users": ["ana"], "gpu_quota": 8, "qos": ["production"]}],
    )
    assert spec.teams[0].gpu_quota == 8


def test_nodes_may_report_themselves_to_the_group_eks_made(mocks: GpuforgeMocks) -> None:
    deploy()
    asg = gpu_group(mocks).outputs["resources"][0]["autoscalingGroups"][0]["name"]
    policy = mocks.named("demo-nodes-set-health")
    assert policy.inputs["role"] == mocks.named("demo-nodes-role").outputs["name"]
    document = json.loads(policy.inputs["policy"])
    (statement,) = document["Statement"]
    assert statement["Action"] == "autoscaling:SetInstanceHealth"
    assert statement["Resource"] == (
        f"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/{asg}"
    )


def test_gpu_nodes_carry_what_the_kueue_flavor_selects_and_tolerates(mocks: GpuforgeMocks) -> None:
    """The node group's join labels and taint match the ResourceFlavor `gpuforge scheduler render` writes."""
    deploy()
    flavor = kueue.resource_flavor(
        "demo",
        kueue.GpuNodeGroup(
            name=gpu_group_name("demo"), instance_type=hardware.get("p5.48xlarge"), node_count=2
        ),
    )
    cloud = yaml.safe_load(parts(mocks)["text/cloud-config"])
    env = next(item["content"] for item in cloud["write_files"] if item["path"] == eks_join.KUBELET_ENV)
    for key, value in flavor["spec"]["nodeLabels"].items():
        assert f"{key}={value}" in env
    (toleration,) = flavor["spec"]["tolerations"]
    assert f"--register-with-taints={toleration['key']}=true:{toleration['effect']}" in env


def test_node_agent_has_its_own_identity_bound_to_its_kubernetes_group(mocks: GpuforgeMocks) -> None:
    """The node agent taints its node as an IAM role of its own (NodeRestriction forbids the kubelet's): a
    STANDARD access entry maps it to the group the rendered ClusterRoleBinding names, only the node role may
    assume it, and the user data's agent kubeconfig assumes it (aws-iam-authenticator token --role)."""
    deploy()
    agent = mocks.named("demo-nodes-agent-role")
    node_role = mocks.named("demo-nodes-role").outputs["arn"]
    entries = {entry.name: entry.inputs for entry in mocks.of_type(ACCESS_ENTRY)}
    assert entries["demo-nodes-agent-access"] == {
        "clusterName": "demo",
        "principalArn": agent.outputs["arn"],
        "type": "STANDARD",
        "kubernetesGroups": [node_agent.GROUP],
    }
    (binding_subject,) = node_agent.cluster_role_binding()["subjects"]
    assert binding_subject["name"] in entries["demo-nodes-agent-access"]["kubernetesGroups"]
    (trust,) = json.loads(agent.inputs["assumeRolePolicy"])["Statement"]
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Principal"] == {"AWS": node_role}
    (allowed,) = json.loads(mocks.named("demo-nodes-assume-agent").inputs["policy"])["Statement"]
    assert (allowed["Action"], allowed["Resource"]) == ("sts:AssumeRole", agent.outputs["arn"])
    assert (
        mocks.named("demo-nodes-assume-agent").inputs["role"]
        == mocks.named("demo-nodes-role").outputs["name"]
    )
    cloud = yaml.safe_load(parts(mocks)["text/cloud-config"])
    files = {item["path"]: item for item in cloud["write_files"]}
    written = files[eks_join.AGENT_KUBECONFIG]
    assert written["path"] == "/etc/gpuforge/node-agent.kubeconfig"
    assert written["permissions"] == "0600"
    kubeconfig = yaml.safe_load(written["content"])
    exec_ = kubeconfig["users"][0]["user"]["exec"]
    assert exec_["command"] == eks_join.AUTHENTICATOR
    assert exec_["args"] == ["token", "-i", "demo", "--region", "us-east-1", "--role", agent.outputs["arn"]]


def test_the_join_enables_the_periodic_kubernetes_check(mocks: GpuforgeMocks) -> None:
    """Only an EKS node's user data enables gpuforge-kubernetes-check.timer, a unit the image carries."""
    deploy()
    cloud = yaml.safe_load(parts(mocks)["text/cloud-config"])
    assert cloud["runcmd"] == [
        ["systemctl", "enable", "--now", "--no-block", "gpuforge-kubernetes-check.timer"]
    ]
    assert (REPO / "images/files/kubernetes/gpuforge-kubernetes-check.timer").is_file()


def test_gpu_nodes_register_the_taint_value_of_the_pins(
    mocks: GpuforgeMocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The taint's value comes from gpuforge/data/kubernetes_addons.yaml, the file the policy rules read."""
    from gpuforge.components import eks_nodes
    from gpuforge.kubernetes.addons import pins

    shipped = pins()
    other = shipped.model_copy(
        update={"gpu_taint": shipped.gpu_taint.model_copy(update={"value": "present"})}
    )
    monkeypatch.setattr(eks_nodes, "pins", lambda: other)
    deploy()
    cloud = yaml.safe_load(parts(mocks)["text/cloud-config"])
    env = next(item["content"] for item in cloud["write_files"] if item["path"] == eks_join.KUBELET_ENV)
    assert "--register-with-taints=nvidia.com/gpu=present:NoSchedule" in env
