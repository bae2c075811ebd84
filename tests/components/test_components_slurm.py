"""The Slurm controller in a GpuCluster: its instance and address, state volume, key, security groups, user data."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import ipaddress
import json
from typing import Any

import pulumi
import pytest
from components_helpers import (
    AMI,
    EGRESS,
    INGRESS,
    INSTANCE,
    NOW,
    ROLE_POLICY,
    SECURITY_GROUP,
    VPC_ENDPOINT,
    cluster_spec,
    one,
    run,
    user_data,
)
from pulumi.runtime import rpc

from gpuforge import hardware
from gpuforge.components import GpuCluster, GpuClusterSpec, NetworkSpec, SchedulerSpec
from gpuforge.components.slurm_controller import (
    CONTROLLER_ROLE,
    ROLE_TAG,
    controller_address,
    slurm_cluster,
)
from gpuforge.components.user_data import SlurmJoin, UserDataParams
from gpuforge.components.user_data import render as render_user_data
from gpuforge.errors import InputError
from gpuforge.images.disk import ROOT_VOLUME_GIB as IMAGE_ROOT_VOLUME_GIB
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource, install
from gpuforge.scheduler.render import SlurmSite, node_registration

SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")
VERSION = "26.05.5"
RANDOM_BYTES = "random:index/randomBytes:RandomBytes"
SECRET = "aws:secretsmanager/secret:Secret"
SECRET_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
VOLUME = "aws:ebs/volume:Volume"
ATTACHMENT = "aws:ec2/volumeAttachment:VolumeAttachment"
ROLE = "aws:iam/role:Role"
SUBNET = "aws:ec2/subnet:Subnet"
SECRET_SIG, SECRET_VALUE_SIG = rpc._special_sig_key, rpc._special_secret_sig


def deploy(spec: GpuClusterSpec, slurm_version: str | None = VERSION) -> dict[str, Any]:
    """Build the cluster; its summary and Slurm files, resolved."""

    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("demo", spec, now=NOW, slurm_version=slurm_version)
        return pulumi.Output.all(cluster.summary, cluster.slurm_config)

    summary, files = run(build)
    json.dumps(summary)
    return {"summary": summary, "files": files}


def controller(mocks: GpuforgeMocks) -> RecordedResource:
    (found,) = [r for r in mocks.of_type(INSTANCE) if r.inputs["tags"].get(ROLE_TAG) == CONTROLLER_ROLE]
    return found


def controller_user_data(mocks: GpuforgeMocks) -> str:
    # The controller's user data is gzip-compressed (cloud-init uncompresses it): see slurm_controller._encoded.
    return gzip.decompress(base64.b64decode(controller(mocks).inputs["userDataBase64"])).decode("utf-8")


def group_id(mocks: GpuforgeMocks, name: str) -> str:
    (found,) = [group.id for group in mocks.of_type(SECURITY_GROUP) if group.name == name]
    return found


def test_the_controller_instance_sits_at_its_fixed_address_in_the_private_subnet(
    mocks: GpuforgeMocks,
) -> None:
    out = deploy(cluster_spec(scheduler=SLURM))
    instance = controller(mocks)
    subnet = one(mocks, SUBNET)
    assert instance.inputs["subnetId"] == subnet.id
    address = ipaddress.IPv4Address(instance.inputs["privateIp"])
    block = ipaddress.IPv4Network(subnet.inputs["cidrBlock"])
    assert address in block and address == block.network_address + 10
    assert str(address) == "10.0.0.10"  # the default VPC 10.0.0.0/16, private half 10.0.0.0/17
    # The cluster's own catalogued AMI (it carries the pinned Slurm), on the CPU type asked for.
    assert instance.inputs["ami"] == AMI.ami_id
    assert instance.inputs["instanceType"] == "m7i.2xlarge"
    assert instance.inputs["metadataOptions"]["httpTokens"] == "required"
    assert instance.inputs["associatePublicIpAddress"] is False
    assert instance.inputs["rootBlockDevice"]["encrypted"] is True
    # It boots the GPU image: a root smaller than the image's root snapshot would not launch.
    assert instance.inputs["rootBlockDevice"]["volumeSize"] >= IMAGE_ROOT_VOLUME_GIB
    assert instance.inputs["userDataReplaceOnChange"] is True
    assert instance.inputs["tags"]["gpuforge:cluster"] == "demo"
    scheduler = out["summary"]["scheduler"]
    assert scheduler == {
        "type": "slurm",
        "slurm_version": VERSION,
        "controller_instance_type": "m7i.2xlarge",
        "controller_host": "demo-slurmctld",
        "controller_address": "10.0.0.10",
        "partitions": [{"name": "gpu", "max_time": None, "default": True}],
    }
    assert "SlurmctldHost=demo-slurmctld(10.0.0.10)\n" in out["files"]["slurm.conf"]
    # p5 reports its network topology: topology/tree, starting from the one pending switch.
    assert set(out["files"]) == {
        "slurm.conf",
        "gres.conf",
        "cgroup.conf",
        "topology.conf",
        "slurmdbd.conf",
        "gpuforge-accounts.json",
    }
    assert "TopologyPlugin=topology/tree\n" in out["files"]["slurm.conf"]
    assert out["files"]["topology.conf"].endswith("SwitchName=demo-unplaced\n")


def test_the_address_follows_the_vpc_block_and_an_existing_subnet(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM, network=NetworkSpec(vpc_cidr="172.16.0.0/20")))
    assert controller(mocks).inputs["privateIp"] == "172.16.0.10"

    existing = install(GpuforgeMocks(subnet_cidrs={"subnet-0123456789abcdef0": "10.20.30.0/24"}))
    network = NetworkSpec(
        vpc_id="vpc-0123456789abcdef0",
        subnet_id="subnet-0123456789abcdef0",
        route_table_ids=("rtb-0123456789abcdef0",),
    )
    out = deploy(cluster_spec(scheduler=SLURM, network=network))
    assert controller(existing).inputs["privateIp"] == "10.20.30.10"
    assert controller(existing).inputs["subnetId"] == "subnet-0123456789abcdef0"
    assert out["summary"]["scheduler"]["controller_address"] == "10.20.30.10"


def test_controller_address_is_the_tenth_host_of_any_aws_subnet() -> None:
    assert controller_address("10.0.0.0/17") == "10.0.0.10"
    assert controller_address("192.168.4.16/28") == "192.168.4.26"
    with pytest.raises(InputError, match=r"subnet_cidr = '10.0.0.0/29'.*/28 or larger"):
        controller_address("10.0.0.0/29")
    with pytest.raises(InputError, match="not an IPv4 network"):
        controller_address("10.0.0.0/33")


def test_slurmctld_state_is_on_an_encrypted_volume_mounted_by_the_user_data(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    volume = one(mocks, VOLUME)
    attachment = one(mocks, ATTACHMENT)
    assert volume.inputs["encrypted"] is True and volume.inputs["type"] == "gp3"
    assert volume.inputs["availabilityZone"] == "us-east-1a"
    assert attachment.inputs["volumeId"] == volume.id
    assert attachment.inputs["instanceId"] == controller(mocks).id
    script = controller_user_data(mocks)
    assert f"readonly STATE_VOLUME_ID={volume.id}\n" in script
    assert f"readonly STATE_DIR={SlurmSite.state_dir}\n" in script
    assert "mkfs.xfs" in script and 'mount "$STATE_DIR"' in script
    # The files go to /etc/slurm; the hostname is SlurmctldHost's; slurmctld starts last, and waits for its state.
    assert "readonly SLURMCTLD_HOST=demo-slurmctld\n" in script
    assert 'printf \'%s\' "$SLURM_CONF_TEXT" | write_file "$SLURM_ETC/slurm.conf"' in script
    assert "RequiresMountsFor=$STATE_DIR" in script
    assert "systemctl enable --now slurmctld.service" in script
    order = ["step set_hostname", "step mount_state", "step write_slurm_files", "step fetch_slurm_key"]
    positions = [script.index(step) for step in [*order, "step start_slurmctld"]]
    assert positions == sorted(positions)
    assert "gpuforge node check" not in script  # a CPU instance: no GPU check


def _rule(mocks: GpuforgeMocks, rule: RecordedResource) -> tuple[str, str, str, int, int]:
    names = {group.id: group.name for group in mocks.of_type(SECURITY_GROUP)}
    return (
        names.get(rule.inputs["securityGroupId"], rule.inputs["securityGroupId"]),
        names.get(rule.inputs.get("referencedSecurityGroupId", ""), rule.inputs.get("cidrIpv4", "")),
        rule.inputs["ipProtocol"],
        int(rule.inputs.get("fromPort", -1)),
        int(rule.inputs.get("toPort", -1)),
    )


def test_security_group_rules_are_exactly_slurm_s_ports_between_groups(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    controller_group = group_id(mocks, "demo-slurm-sg")
    assert controller(mocks).inputs["vpcSecurityGroupIds"] == [controller_group]
    slurm_rules = {
        _rule(mocks, rule) for rule in mocks.of_type(INGRESS) if rule.name.startswith("demo-slurm-")
    }
    low, high = SlurmSite.srun_port_range
    ctld, slurmd = SlurmSite.slurmctld_port, SlurmSite.slurmd_port
    assert slurm_rules == {
        ("demo-slurm-sg", "demo-network-efa", "tcp", ctld, ctld),
        ("demo-network-efa", "demo-slurm-sg", "tcp", slurmd, slurmd),
        ("demo-network-efa", "demo-network-efa", "tcp", slurmd, slurmd),
        ("demo-network-efa", "demo-slurm-sg", "tcp", low, high),
        ("demo-network-efa", "demo-network-efa", "tcp", low, high),
        ("demo-network-endpoints", "demo-slurm-sg", "tcp", 443, 443),
    }
    # The controller takes nothing else in, and no ingress rule of the cluster names an address range.
    into_controller = [r for r in mocks.of_type(INGRESS) if r.inputs["securityGroupId"] == controller_group]
    assert len(into_controller) == 1
    for rule in mocks.of_type(INGRESS):
        assert "cidrIpv4" not in rule.inputs and "cidrIpv6" not in rule.inputs, rule.name
    (out,) = [r for r in mocks.of_type(EGRESS) if r.inputs["securityGroupId"] == controller_group]
    assert (out.inputs["cidrIpv4"], out.inputs["ipProtocol"]) == ("0.0.0.0/0", "-1")


def test_the_nodes_reach_secrets_manager_through_an_endpoint(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    services = {endpoint.inputs["serviceName"] for endpoint in mocks.of_type(VPC_ENDPOINT)}
    assert "com.amazonaws.us-east-1.secretsmanager" in services


def _policy(resource: RecordedResource) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(resource.inputs["policy"])
    return document


def test_the_key_is_random_secret_and_readable_by_the_two_roles_only(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    key = one(mocks, RANDOM_BYTES)
    assert key.inputs["length"] == 1024.0
    assert len(base64.b64decode(key.outputs["base64"])) == 1024
    secret = one(mocks, SECRET)
    version = one(mocks, SECRET_VERSION)
    assert version.inputs["secretId"] == secret.id
    # The engine receives the key as a secret value (Pulumi's secret signature), never as plain text.
    secret_string = version.inputs["secretString"]
    assert secret_string[SECRET_SIG] == SECRET_VALUE_SIG
    assert secret_string["value"] == key.outputs["base64"]
    readers = [p for p in mocks.of_type(ROLE_POLICY) if "secretsmanager" in p.inputs["policy"]]
    roles = {role.outputs["name"]: role.name for role in mocks.of_type(ROLE)}
    assert sorted(roles[p.inputs["role"]] for p in readers) == ["demo-nodes-role", "demo-slurm-role"]
    for reader in readers:
        assert _policy(reader)["Statement"] == [
            {
                "Sid": "SlurmKey",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": secret.outputs["arn"],
            }
        ]
    # The controller runs with its own role, through its own instance profile.
    profile = controller(mocks).inputs["iamInstanceProfile"]
    (controller_profile,) = [
        p for p in mocks.of_type("aws:iam/instanceProfile:InstanceProfile") if p.outputs["name"] == profile
    ]
    assert roles[controller_profile.inputs["role"]] == "demo-slurm-role"


def test_no_user_data_holds_the_key_and_both_fetch_it(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    key = one(mocks, RANDOM_BYTES)
    arn = one(mocks, SECRET).outputs["arn"]
    for script in (controller_user_data(mocks), user_data(mocks)):
        assert key.outputs["base64"][:24] not in script
        assert key.outputs["hex"][:24] not in script
        assert f"readonly SLURM_KEY_SECRET_ARN={arn}\n" in script
        assert "get_secret_value(SecretId=arn)" in script
        assert "readonly SLURM_KEY_FILE=/etc/slurm/slurm.key\n" in script
        assert 'chown "$SLURM_USER:$SLURM_USER" "$tmp"' in script and 'chmod 0600 "$tmp"' in script


def test_nodes_start_slurmd_with_the_registration_and_the_controller_after_the_check(
    mocks: GpuforgeMocks,
) -> None:
    spec = cluster_spec(scheduler=SLURM)
    deploy(spec)
    script = user_data(mocks)
    cluster = slurm_cluster(
        "demo",
        node_instance_type=hardware.get("p5.48xlarge"),
        capacity_type="on-demand",
        max_nodes=2,
        scheduler=SLURM,
        slurm_version=VERSION,
        address="10.0.0.10",
    )
    registration = node_registration(cluster)
    assert f"readonly SLURM_NODE_CONF='{registration}'\n" in script
    assert "readonly SLURM_CONF_SERVER=10.0.0.10:6817\n" in script
    assert 'SLURMD_OPTIONS="-Z -N %s --conf-server %s --conf %s"' in script
    assert 'node="$(imds instance-id)"' in script
    assert script.index("step run_node_check") < script.index("step join_slurm")
    assert 'if [[ ! -e "$NODE_CHECK_PASSED" ]]' in script
    assert "readonly NODE_CHECK_PASSED=/run/gpuforge/node-check.passed\n" in script
    # The one boot gate on slurmd is the image's drop-in (images/files/slurmd-gpuforge.conf).
    assert "slurmd.service.d" not in script
    assert "systemctl enable --now slurmd.service" in script
    assert "ExecStop=-$SCONTROL delete nodename=$node" in script
    # The launch template waits for the controller: its address is the instance's own.
    template = one(mocks, "aws:ec2/launchTemplate:LaunchTemplate")
    assert controller(mocks).urn in template.dependencies


def test_partitions_reach_slurm_conf_and_the_summary(mocks: GpuforgeMocks) -> None:
    scheduler = SchedulerSpec.model_validate(
        {
            "type": "slurm",
            "controller_instance_type": "m7i.2xlarge",
            "partitions": [{"name": "batch", "max_time": "2-00:00:00"}, {"name": "debug", "max_time": "60"}],
        }
    )
    out = deploy(cluster_spec(scheduler=scheduler))
    conf = out["files"]["slurm.conf"]
    assert "PartitionName=batch Nodes=gpunodes Default=YES MaxTime=2-00:00:00 State=UP\n" in conf
    assert "PartitionName=debug Nodes=gpunodes Default=NO MaxTime=60 State=UP\n" in conf
    assert [p["name"] for p in out["summary"]["scheduler"]["partitions"]] == ["batch", "debug"]
    # Room for replacements while dead nodes' records remain: twice the group.
    assert "MaxNodeCount=4\n" in conf


def test_no_scheduler_means_no_controller(mocks: GpuforgeMocks) -> None:
    out = deploy(cluster_spec(), slurm_version=None)
    assert mocks.of_type("gpuforge:scheduler:SlurmController") == []
    assert [r for r in mocks.resources if "secretsmanager" in r.type or r.type == RANDOM_BYTES] == []
    assert [r.name for r in mocks.of_type(INSTANCE)] == []
    services = {endpoint.inputs["serviceName"] for endpoint in mocks.of_type(VPC_ENDPOINT)}
    assert "com.amazonaws.us-east-1.secretsmanager" not in services
    assert "join_slurm" not in user_data(mocks)
    assert out["files"] == {}
    assert out["summary"]["scheduler"] == {
        "type": "none",
        "slurm_version": None,
        "controller_instance_type": None,
        "controller_host": None,
        "controller_address": None,
        "partitions": [],
    }


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (None, "slurm_version = None"),
        ("26.05", "slurm_version = '26.05': a Slurm version is one exact release"),
        ("23.02.7", "AuthType=auth/slurm, CredType=cred/slurm needs Slurm 23.11.0 or newer"),
    ],
)
def test_a_slurm_cluster_needs_a_renderable_slurm_version(
    mocks: GpuforgeMocks, version: str | None, expected: str
) -> None:
    with pytest.raises(InputError) as caught:
        deploy(cluster_spec(scheduler=SLURM), slurm_version=version)
    assert expected in caught.value.message and "Fix:" in caught.value.message
    assert mocks.resources == ()  # refused before any resource was registered


def test_mocks_answer_the_new_types_as_aws_and_random_do(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    key = one(mocks, RANDOM_BYTES)
    assert bytes.fromhex(key.outputs["hex"]) == base64.b64decode(key.outputs["base64"])
    secret = one(mocks, SECRET)
    assert secret.id == secret.outputs["arn"]
    prefix = f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{secret.outputs['name']}-"
    assert secret.outputs["arn"].startswith(prefix) and len(secret.outputs["arn"]) == len(prefix) + 6
    volume = one(mocks, VOLUME)
    assert volume.id.startswith("vol-") and len(volume.id) == 21
    assert controller(mocks).outputs["privateIp"] == "10.0.0.10"


def _topology_readers(mocks: GpuforgeMocks) -> list[RecordedResource]:
    return [p for p in mocks.of_type(ROLE_POLICY) if "DescribeInstanceTopology" in p.inputs["policy"]]


def test_a_type_aws_reports_topology_for_gets_the_controller_s_topology_sync(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(scheduler=SLURM))
    (reader,) = _topology_readers(mocks)
    roles = {role.outputs["name"]: role.name for role in mocks.of_type(ROLE)}
    assert roles[reader.inputs["role"]] == "demo-slurm-role"
    assert _policy(reader)["Statement"] == [
        {
            "Sid": "SlurmTopology",
            "Effect": "Allow",
            "Action": ["ec2:DescribeInstanceTopology", "ec2:DescribeInstances"],
            "Resource": "*",
        }
    ]
    script = controller_user_data(mocks)
    assert "    step start_topology_sync\n" in script
    assert "readonly TOPOLOGY_INSTANCE_TYPE=p5.48xlarge\n" in script
    assert "readonly TOPOLOGY_REGION=us-east-1\n" in script
    assert script.index("step start_slurmctld") < script.index("step start_topology_sync")


def test_a_type_without_aws_topology_gets_no_sync_and_no_topology_plugin(mocks: GpuforgeMocks) -> None:
    out = deploy(cluster_spec(scheduler=SLURM, instance_type="g6.xlarge", node_count=1))
    assert _topology_readers(mocks) == []
    assert "start_topology_sync" not in controller_user_data(mocks).split("main() {")[1]
    assert "topology.conf" not in out["files"]
    assert "TopologyPlugin" not in out["files"]["slurm.conf"]


@pytest.mark.parametrize("field", ["conf_server", "registration"])
def test_a_newline_in_slurmd_s_options_never_reaches_the_node_s_user_data(field: str) -> None:
    join = SlurmJoin(
        conf_server="10.0.0.10:6817",
        registration="CPUs=192 Feature=p5.48xlarge",
        key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:demo-slurm-key-secret-AbCdEf",
    )
    hostile = dataclasses.replace(join, **{field: getattr(join, field) + "\n"})
    with pytest.raises(ValueError, match="slurmd's options cannot carry"):
        render_user_data(UserDataParams("demo", "p5.48xlarge", 8, None, True, slurm=hostile))
    assert "SLURM_NODE_CONF=" in render_user_data(
        UserDataParams("demo", "p5.48xlarge", 8, None, True, slurm=join)
    )
