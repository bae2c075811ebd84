"""Slurm accounting on the controller, under the Pulumi SDK's mocks (preview=False): local and Aurora.

The scheduler's renderer (gpuforge.scheduler.render, issue 22's helper A) gains slurmdbd.conf; until it does,
`with_slurmdbd_conf` stands in for it here: it adds a password-less slurmdbd.conf to the rendered files, as the
contract says the renderer will.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pulumi
import pytest
from components_helpers import AMI, INSTANCE, ROLE_POLICY, run

from gpuforge.components import SchedulerSpec, slurm_controller
from gpuforge.components.slurm_controller import SlurmController, SlurmControllerArgs
from gpuforge.components.specs import AccountingSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource

SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")
RDS_CLUSTER = "aws:rds/cluster:Cluster"
NODES_SG = "sg-0123456789abcdef0"
RENDERED_DBD = (
    "AuthType=auth/slurm\nDbdHost=demo-slurmctld\nSlurmUser=slurm\nStorageType=accounting_storage/mysql\n"
)


@pytest.fixture(autouse=True)
def with_slurmdbd_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    render = slurm_controller.render_files

    def rendered(cluster: Any) -> Any:
        files = dict(render(cluster))
        if not any(str(name) == "slurmdbd.conf" for name in files):
            files["slurmdbd.conf"] = RENDERED_DBD
        return files

    monkeypatch.setattr(slurm_controller, "render_files", rendered)


def deploy(database: str, vpc_cidr: str | None = "10.0.0.0/16") -> None:
    def build() -> pulumi.Output[Any]:
        controller = SlurmController(
            "demo-slurm",
            SlurmControllerArgs(
                cluster_name="demo",
                scheduler=SLURM,
                slurm_version="26.05.5",
                node_instance_type="p5.48xlarge",
                capacity_type="on-demand",
                max_nodes=2,
                ami=AMI,
                availability_zone="us-east-1a",
                vpc_id="vpc-0b0b0b0b0b0b0b0b0",
                subnet_id="subnet-0a0a0a0a0a0a0a0a0",
                subnet_cidr="10.0.0.0/17",
                nodes_security_group_id=NODES_SG,
                accounting_database=database,  # type: ignore[arg-type]
                vpc_cidr=vpc_cidr,
            ),
        )
        return pulumi.Output.all(controller.instance_id, controller.database_endpoint)

    run(build)


def controller_script(mocks: GpuforgeMocks) -> str:
    (instance,) = mocks.of_type(INSTANCE)
    return gzip.decompress(base64.b64decode(instance.inputs["userDataBase64"])).decode("utf-8")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a resource's inputs or outputs, with base64/gzip user data decoded."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value
        # "H4sI" is base64 of gzip's magic bytes and first flags: the controller's compressed user data.
        if value.startswith("H4sI"):
            yield gzip.decompress(base64.b64decode(value, validate=True)).decode("utf-8")


def _password_keys(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if re.search("pass", str(key), re.I):
                yield f"{path}{key}"
            yield from _password_keys(item, f"{path}{key}.")
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _password_keys(item, path)


@pytest.mark.parametrize("database", ["local", "aurora"])
def test_no_resource_holds_a_database_password(mocks: GpuforgeMocks, database: str) -> None:
    deploy(database)
    resources: list[RecordedResource] = list(mocks.resources)
    # Nothing makes a password in Pulumi: no random password, no secret value but the Slurm key's.
    assert not [r for r in resources if r.type.startswith("random:") and "Password" in r.type]
    versions = [r for r in resources if r.type == "aws:secretsmanager/secretVersion:SecretVersion"]
    assert [r.name for r in versions] == ["demo-slurm-key-version"]
    # No input or output names a password, except RDS's switch that makes RDS keep it.
    keys = {key for r in resources for part in (r.inputs, r.outputs) for key in _password_keys(part)}
    assert keys <= {"manageMasterUserPassword"}
    # The user data, decoded, holds no StoragePass value and no slurmdbd.conf with one.
    texts = [text for r in resources for part in (r.inputs, r.outputs) for text in _strings(part)]
    assert not [text for text in texts if re.search(r"StoragePass\s*=\s*(?!\{escaped\})\S", text, re.I)]
    script = controller_script(mocks)
    assert "StoragePass={escaped}" in script  # written only on the controller, from the file or the secret


def test_local_database_makes_no_aws_database_and_reads_a_password_on_the_state_volume(
    mocks: GpuforgeMocks,
) -> None:
    deploy("local")
    assert [r for r in mocks.resources if r.type.startswith("aws:rds/")] == []
    script = controller_script(mocks)
    assert "readonly ACCOUNTING_SECRET=/var/spool/slurmctld/accounting-db.password\n" in script
    assert "step setup_mariadb" in script
    # Only the Slurm key: the controller's role reads one secret.
    secrets = [p for p in mocks.of_type(ROLE_POLICY) if "secretsmanager" in p.inputs["policy"]]
    assert [json.loads(p.inputs["policy"])["Statement"][0]["Sid"] for p in secrets] == ["SlurmKey"]


def test_aurora_user_data_names_the_endpoint_and_the_managed_secret_and_the_role_reads_only_it(
    mocks: GpuforgeMocks,
) -> None:
    deploy("aurora")
    (cluster,) = mocks.of_type(RDS_CLUSTER)
    secret_arn = cluster.outputs["masterUserSecrets"][0]["secretArn"]
    script = controller_script(mocks)
    assert f"readonly STORAGE_HOST={cluster.outputs['endpoint']}\n" in script
    assert f"readonly ACCOUNTING_SECRET='{secret_arn}'\n" in script
    assert "setup_mariadb" not in script
    roles = {r.outputs["name"]: r.name for r in mocks.of_type("aws:iam/role:Role")}
    readers = [p for p in mocks.of_type(ROLE_POLICY) if "secretsmanager" in p.inputs["policy"]]
    statements = {
        json.loads(p.inputs["policy"])["Statement"][0]["Sid"]: (
            roles[p.inputs["role"]],
            json.loads(p.inputs["policy"]),
        )
        for p in readers
    }
    role, policy = statements["AccountingDatabaseSecret"]
    assert role == "demo-slurm-role"
    assert policy["Statement"] == [
        {
            "Sid": "AccountingDatabaseSecret",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": secret_arn,
        }
    ]
    # The database's group takes MySQL from the controller's group only.
    (controller_sg,) = [
        g.id for g in mocks.of_type("aws:ec2/securityGroup:SecurityGroup") if g.name == "demo-slurm-sg"
    ]
    mysql = [
        r.inputs
        for r in mocks.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if r.inputs.get("fromPort") == 3306.0
    ]
    assert [rule["referencedSecurityGroupId"] for rule in mysql] == [controller_sg]


def test_aurora_in_an_existing_vpc_is_refused_before_any_resource(mocks: GpuforgeMocks) -> None:
    with pytest.raises(InputError) as caught:
        deploy("aurora", vpc_cidr=None)
    message = caught.value.message
    assert "scheduler.accounting.database" in message and "two Availability Zones" in message
    assert "Fix: use accounting.database: local" in message
    assert mocks.resources == ()


def test_the_state_volume_holds_slurmctld_and_a_year_of_a_busy_cluster_s_accounting() -> None:
    needed = slurm_controller.state_volume_needed_gib()
    assert 16 < needed <= slurm_controller.STATE_VOLUME_GIB  # 1 + 1 + 14.1 GiB at 20,000 jobs a day
    # Twice that rate would not fit: the figure is a real bound, not a formality.
    assert slurm_controller.state_volume_needed_gib(jobs_per_day=40_000) > slurm_controller.STATE_VOLUME_GIB


def test_the_state_file_system_grows_with_its_volume(mocks: GpuforgeMocks) -> None:
    deploy("local")
    script = controller_script(mocks)
    mount = script[script.index("mount_state() {") :]
    assert mount.index('mount "$STATE_DIR"') < mount.index('xfs_growfs "$STATE_DIR"') < mount.index("\n}\n")


# -- the whole cluster ----------------------------------------------------------------------------------


def _aurora_scheduler() -> SchedulerSpec:
    """The stack's `gpuforge:scheduler` with `accounting.database: aurora`."""
    scheduler = SchedulerSpec(
        type="slurm", controller_instance_type="m7i.2xlarge", accounting=AccountingSpec(database="aurora")
    )
    return scheduler


def _cluster(spec: Any) -> dict[str, Any]:
    from components_helpers import NOW

    from gpuforge.components import GpuCluster

    def build() -> pulumi.Output[Any]:
        return GpuCluster("demo", spec, now=NOW, slurm_version="26.05.5").summary

    summary: dict[str, Any] = run(build)
    return summary


def test_a_cluster_with_aurora_makes_it_in_its_vpc_and_says_so(mocks: GpuforgeMocks) -> None:
    from components_helpers import cluster_spec

    summary = _cluster(cluster_spec(scheduler=_aurora_scheduler()))
    (cluster,) = mocks.of_type(RDS_CLUSTER)
    assert summary["accounting"] == {
        "database": "aurora",
        "engine_version": "8.0.mysql_aurora.3.10.5",
        "endpoint": cluster.outputs["endpoint"],
        "state_volume_gib": 20,
    }
    (vpc,) = mocks.of_type("aws:ec2/vpc:Vpc")
    (database_subnet,) = [
        s for s in mocks.of_type("aws:ec2/subnet:Subnet") if s.name == "demo-slurm-accounting-subnet"
    ]
    assert (
        database_subnet.inputs["vpcId"] == vpc.id and database_subnet.inputs["cidrBlock"] == "10.0.255.0/24"
    )
    assert f"readonly STORAGE_HOST={cluster.outputs['endpoint']}\n" in controller_script(mocks)


def test_a_cluster_keeps_local_accounting_by_default(mocks: GpuforgeMocks) -> None:
    from components_helpers import cluster_spec

    summary = _cluster(cluster_spec(scheduler=SLURM))
    assert summary["accounting"]["database"] == "local"
    assert [r for r in mocks.resources if r.type.startswith("aws:rds/")] == []


def test_a_cluster_without_slurm_has_no_accounting(mocks: GpuforgeMocks) -> None:
    from components_helpers import cluster_spec

    summary = _cluster(cluster_spec())
    assert summary["accounting"] == {
        "database": None,
        "engine_version": None,
        "endpoint": None,
        "state_volume_gib": None,
    }


def test_aurora_in_an_existing_vpc_leaves_no_resource_behind(mocks: GpuforgeMocks) -> None:
    from components_helpers import cluster_spec

    from gpuforge.components import NetworkSpec

    existing = NetworkSpec(
        vpc_id="vpc-0123456789abcdef0", subnet_id="subnet-0123456789abcdef0", api_access="existing"
    )
    with pytest.raises(InputError, match="two Availability Zones"):
        _cluster(cluster_spec(scheduler=_aurora_scheduler(), network=existing))
    assert mocks.resources == ()
