"""The accounting database under the policy pack: rds-database-hardened, rds-not-public, rds-tls-required.

Every case is AccountingDatabase's real output under the mocks; a violating case changes one of its settings
through a Pulumi transformation, as a user could.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pytest
from policy_helpers import Images, cluster, edit, mandatory, of, record, spec, verdicts

from gpuforge.components.accounting_db import AccountingDatabase, AccountingDatabaseArgs
from gpuforge.policies.pack import POLICIES
from gpuforge.pulumi_mocks import RecordedResource

CLUSTER = "aws:rds/cluster:Cluster"
INSTANCE = "aws:rds/clusterInstance:ClusterInstance"
PARAMETERS = "aws:rds/clusterParameterGroup:ClusterParameterGroup"


def database(
    *transformations: pulumi.ResourceTransformation, preview: bool = False
) -> list[RecordedResource]:
    return record(
        lambda: AccountingDatabase(
            "demo-slurm-accounting",
            AccountingDatabaseArgs(
                cluster_name="demo",
                vpc_id="vpc-0b0b0b0b0b0b0b0b0",
                vpc_cidr="10.0.0.0/16",
                subnet_id="subnet-0a0a0a0a0a0a0a0a0",
                availability_zone="us-east-1a",
                controller_security_group_id="sg-0c0c0c0c0c0c0c0c0",
            ),
            pulumi.ResourceOptions(transformations=list(transformations)),
        ),
        preview=preview,
    )


def _messages(resources: Sequence[RecordedResource], policy: str) -> list[str]:
    return [verdict.message for verdict in of(verdicts(resources), policy)]


def test_the_pack_holds_the_three_rules() -> None:
    names = {policy.name for policy in POLICIES}
    assert {"rds-database-hardened", "rds-not-public", "rds-tls-required"} <= names


@pytest.mark.parametrize("preview", [False, True])
def test_accounting_database_passes_every_rule(preview: bool) -> None:
    assert mandatory(verdicts(database(preview=preview))) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"storage_encrypted": False}, "has storageEncrypted False"),
        ({"deletion_protection": None}, "has deletionProtection unset"),
        ({"backup_retention_period": 3}, "keeps backups 3 day(s)"),
        ({"backup_retention_period": None}, "keeps backups 1 day(s)"),
        # (Without manage_master_user_password RDS makes no secret, and AccountingDatabase itself stops.)
        ({"master_password": "hunter2-in-state"}, "a password Pulumi sets is kept in its state"),
    ],
)
def test_each_weakened_setting_is_refused(changes: dict[str, object], expected: str) -> None:
    found = mandatory(verdicts(database(edit(CLUSTER, **changes))))
    [verdict] = [v for v in found if v.policy == "rds-database-hardened"]
    assert expected in verdict.message and "Fix:" in verdict.message
    assert "hunter2" not in verdict.message


def test_a_public_instance_is_refused() -> None:
    [message] = _messages(database(edit(INSTANCE, publicly_accessible=True)), "rds-not-public")
    assert "publicly accessible" in message and "Fix: set publicly_accessible=False" in message


@pytest.mark.parametrize(
    ("transformation", "expected"),
    [
        (
            edit(PARAMETERS, parameters=[{"name": "require_secure_transport", "value": "OFF"}]),
            "sets require_secure_transport=OFF",
        ),
        (edit(PARAMETERS, parameters=[]), "sets require_secure_transport=unset"),
        (edit(CLUSTER, db_cluster_parameter_group_name=None), "names no cluster parameter group"),
        (edit(CLUSTER, db_cluster_parameter_group_name="someone-elses-group"), "is not made by this stack"),
    ],
)
def test_a_cluster_that_does_not_require_tls_is_refused(
    transformation: pulumi.ResourceTransformation, expected: str
) -> None:
    [message] = _messages(database(transformation), "rds-tls-required")
    assert expected in message and "require_secure_transport=ON" in message


def test_a_whole_cluster_with_aurora_passes_the_pack(images: Images, monkeypatch: pytest.MonkeyPatch) -> None:
    """The p5 cluster with `accounting.database: aurora`: every mandatory rule, the IAM and network ones included.

    Stand-in until the scheduler's renderer lands (issue 22): a password-less slurmdbd.conf among the rendered
    files."""
    from gpuforge.components import SchedulerSpec, slurm_controller
    from gpuforge.components.specs import AccountingSpec

    render = slurm_controller.render_files
    monkeypatch.setattr(
        slurm_controller,
        "render_files",
        lambda cluster: {"slurmdbd.conf": "SlurmUser=slurm\n", **render(cluster)},
    )
    scheduler = SchedulerSpec(
        type="slurm", controller_instance_type="m7i.2xlarge", accounting=AccountingSpec(database="aurora")
    )
    reserved = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
    resources = record(cluster(spec(images, capacity=reserved, scheduler=scheduler)))
    assert any(resource.type == CLUSTER for resource in resources)
    assert mandatory(verdicts(resources, images)) == []
