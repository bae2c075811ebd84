"""Accounting in the rendered Slurm files: slurm.conf's accounting/priority/preemption lines, slurmdbd.conf
(never a password) and gpuforge-accounts.json, which reads back as the desired state sync-accounts applies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuforge import hardware
from gpuforge.components.specs import SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.rendered_set import write_set
from gpuforge.scheduler.accounts import desired_state, parse_state
from gpuforge.scheduler.render import ACCOUNTS_FILE, SlurmCluster, SlurmSite, render_files, rendered_for

SITE = SlurmSite(controller_host="t-slurmctld", controller_addr="10.0.0.10")
QOS = (
    {"name": "production", "priority": 1000, "preempts": ["research"]},
    {"name": "research", "priority": 100},
)
TEAMS = (
    {
        "name": "llm",
        "users": ["alice", {"name": "bob", "default": True}],
        "gpu_quota": 12,
        "qos": ["production"],
    },
    {"name": "vision", "users": ["bob"], "gpu_quota": 4, "qos": "research"},
)


def _cluster(database: str = "local", *, qos: object = QOS, site: SlurmSite = SITE) -> SlurmCluster:
    scheduler = SchedulerSpec(
        type="slurm",
        controller_instance_type="m7i.2xlarge",
        accounting={"database": database},  # type: ignore[arg-type]
        qos=qos,  # type: ignore[arg-type]
        teams=TEAMS if qos else (),  # type: ignore[arg-type]
    )
    return SlurmCluster(
        name="tc",
        instance_type=hardware.get("p5.48xlarge"),
        capacity_type="on-demand",
        max_nodes=4,
        scheduler=scheduler,
        slurm_version="26.05.5",
        site=site,
    )


def _settings(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in text.splitlines()
        if line and not line.startswith("#") and "=" in line and " " not in line
    )


def test_slurm_conf_keeps_accounting_with_gpus_as_tres_and_qos_preemption() -> None:
    conf = _settings(render_files(_cluster())["slurm.conf"])
    assert {
        key: conf[key] for key in conf if key.startswith(("Accounting", "JobAcct", "Priority", "Preempt"))
    } == {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStorageHost": "t-slurmctld",
        "AccountingStoragePort": "6819",
        "AccountingStorageTRES": "gres/gpu",
        "AccountingStorageEnforce": "associations,limits,qos,safe",
        "JobAcctGatherType": "jobacct_gather/cgroup",
        "PriorityType": "priority/multifactor",
        "PriorityWeightQOS": "10000",
        "PreemptType": "preempt/qos",
        "PreemptMode": "REQUEUE",
    }


def test_no_preemption_lines_when_no_qos_preempts() -> None:
    conf = _settings(render_files(_cluster(qos=()))["slurm.conf"])
    assert "PreemptType" not in conf and "PreemptMode" not in conf
    assert conf["AccountingStorageEnforce"] == "associations,limits,qos,safe"


def test_slurmdbd_conf_local() -> None:
    conf = _settings(render_files(_cluster())["slurmdbd.conf"])
    assert conf == {
        "AuthType": "auth/slurm",
        "DbdHost": "t-slurmctld",
        "DbdPort": "6819",
        "SlurmUser": "slurm",
        "LogFile": "/var/log/slurm/slurmdbd.log",
        "PidFile": "/run/slurmdbd/slurmdbd.pid",
        "StorageType": "accounting_storage/mysql",
        "StorageHost": "localhost",
        "StoragePort": "3306",
        "StorageUser": "slurm",
        "StorageLoc": "slurm_acct_db",
    }


def test_slurmdbd_conf_aurora_verifies_tls_against_the_rds_bundle() -> None:
    site = SlurmSite(
        controller_host="t-slurmctld",
        controller_addr="10.0.0.10",
        storage_host="tc-accounting.cluster-abc.us-east-1.rds.amazonaws.com",
    )
    conf = _settings(render_files(_cluster("aurora", site=site))["slurmdbd.conf"])
    assert conf["StorageHost"] == "tc-accounting.cluster-abc.us-east-1.rds.amazonaws.com"
    assert conf["StorageParameters"] == "SSL_CA=/etc/gpuforge/rds-ca-bundle.pem"


@pytest.mark.parametrize("database", ["local", "aurora"])
def test_no_rendered_file_holds_a_password(database: str) -> None:
    for name, text in render_files(_cluster(database)).items():
        assert re.search(r"pass(word)?\s*[=:]", text, re.IGNORECASE) is None, name
        assert "StoragePass" not in text, name


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("storage_host", "db host"),
        ("storage_user", "slurm#x"),
        ("storage_loc", "acct\ndb"),
        ("storage_tls_ca", "ca.pem"),
    ],
)
def test_a_storage_value_slurmdbd_would_misread_is_refused(field: str, value: str) -> None:
    with pytest.raises(InputError, match=f"SlurmSite.{field}"):
        SlurmSite(controller_host="t-slurmctld", controller_addr="10.0.0.10", **{field: value})  # type: ignore[arg-type]


def test_accounts_file_reads_back_as_the_desired_state() -> None:
    cluster = _cluster()
    text = render_files(cluster)[ACCOUNTS_FILE]
    state = parse_state(text, ACCOUNTS_FILE)
    assert state.model_copy(update={"comment": ""}) == desired_state("tc", cluster.scheduler)
    assert state.comment.startswith("# gpuforge-accounts.json for cluster tc, rendered by gpuforge")
    assert [(user.name, user.accounts, user.default_account) for user in state.users] == [
        ("alice", ("llm",), "llm"),
        ("bob", ("llm", "vision"), "llm"),
    ]
    assert [(a.name, a.gpu_quota, a.qos) for a in state.accounts] == [
        ("llm", 12, ("production",)),
        ("vision", 4, ("research",)),
    ]
    assert [(q.name, q.priority, q.preempt) for q in state.qos] == [
        ("production", 1000, ("research",)),
        ("research", 100, ()),
    ]


def test_the_rendered_set_is_recognised_as_this_cluster_s_and_replaced(tmp_path: Path) -> None:
    files = {str(name): text for name, text in render_files(_cluster()).items()}
    write_set(tmp_path / "out", files, "tc", rendered_for("tc"))
    written, removed = write_set(tmp_path / "out", files, "tc", rendered_for("tc"))
    assert sorted(Path(path).name for path in written) == sorted(files) and not removed
