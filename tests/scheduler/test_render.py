"""The renderer, the topology reader and `gpuforge scheduler render`, without daemons.

What real Slurm accepts is proved in test_slurm_daemons.py; here: that the files say
what the catalog says for the real instance types, that version gates refuse, that
AWS's topology responses become the right tree (botocore's Stubber checks every canned
response against EC2's own model, as moto implements neither topology call), and the
command's exit codes and messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.components.specs import PartitionSpec, SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.scheduler.render import SlurmCluster, SlurmSite, node_registration, render_files
from gpuforge.scheduler.stack import stack_cluster
from gpuforge.scheduler.topology import MAX_IDS_PER_CALL, fetch_instance_topology, from_response
from gpuforge.stack_config import load_stack_config

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks/training"
SITE = SlurmSite(controller_host="t-slurmctld", controller_addr="10.0.0.10")
SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")


def _cluster(instance_type: str, version: str = "26.05.5", **changes: object) -> SlurmCluster:
    values: dict[str, object] = {
        "name": "tc",
        "instance_type": hardware.get(instance_type),
        "capacity_type": "on-demand",
        "max_nodes": 4,
        "scheduler": SLURM,
        "slurm_version": version,
        "site": SITE,
    }
    values.update(changes)
    return SlurmCluster(**values)  # type: ignore[arg-type]


def _instances(*paths: tuple[str, list[str]], instance_type: str = "p5.48xlarge") -> dict[str, object]:
    """A DescribeInstanceTopology response in the shape AWS's examples print (InstanceType beside each)."""
    return {
        "Instances": [
            {"InstanceId": member, "InstanceType": instance_type, "NetworkNodes": nodes}
            for member, nodes in paths
        ]
    }


def test_p5_gres_binds_each_gpu_to_its_numa_nodes_cores() -> None:
    gres = render_files(_cluster("p5.48xlarge"))["gres.conf"].splitlines()
    gpus = [line for line in gres if line.startswith("Name=gpu")]
    assert "AutoDetect=off" in gres
    assert gpus[0] == "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-47"
    assert gpus[7] == "Name=gpu Type=h100 File=/dev/nvidia7 Cores=48-95"
    assert len(gpus) == 8


def test_p5_node_line_is_the_catalog_row() -> None:
    assert node_registration(_cluster("p5.48xlarge", capacity_type="capacity-block")) == (
        "CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1992294 "
        "Gres=gpu:h100:8 Feature=p5.48xlarge,capacity-block,h100"
    )


def test_slurm_conf_has_the_required_plugins_and_partitions() -> None:
    scheduler = SchedulerSpec(
        type="slurm",
        controller_instance_type="m7i.2xlarge",
        partitions=(
            PartitionSpec(name="batch", max_time="1-00:00:00"),
            PartitionSpec(name="debug", max_time="30"),
        ),
    )
    conf = render_files(_cluster("p6-b200.48xlarge", scheduler=scheduler))["slurm.conf"].splitlines()
    for setting in (
        "SelectType=select/cons_tres",
        "GresTypes=gpu",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SlurmctldParameters=enable_configless",
        "SlurmctldHost=t-slurmctld(10.0.0.10)",
        "MaxNodeCount=4",
        "NodeSet=gpunodes Feature=p6-b200.48xlarge",
        "PartitionName=batch Nodes=gpunodes Default=YES MaxTime=1-00:00:00 State=UP",
        "PartitionName=debug Nodes=gpunodes Default=NO MaxTime=30 State=UP",
    ):
        assert setting in conf
    assert not any(line.startswith("TopologyPlugin") for line in conf)


def test_cgroup_conf_constrains_devices() -> None:
    assert "ConstrainDevices=yes" in render_files(_cluster("g6.xlarge"))["cgroup.conf"].splitlines()


def test_a_version_without_auth_slurm_is_refused_naming_the_setting() -> None:
    with pytest.raises(InputError, match=r"AuthType=auth/slurm.*needs Slurm 23\.11\.0"):
        render_files(_cluster("p5.48xlarge", version="23.02.7"))


def test_topology_is_refused_for_a_version_before_dynamic_node_topology() -> None:
    topology = from_response(_instances(("i-1", ["nn-a", "nn-b", "nn-c"])), where="t")
    with pytest.raises(InputError, match=r"Topology=.*needs Slurm 25\.05\.0"):
        render_files(_cluster("p5.48xlarge", version="24.11.6", topology=topology))


def test_three_and_four_layer_topologies_become_one_tree() -> None:
    response = _instances(
        ("i-1", ["nn-top", "nn-mid1", "nn-leaf1"]),
        ("i-2", ["nn-top", "nn-mid1", "nn-leaf2"]),
        ("i-3", ["nn-top", "nn-mid2", "nn-leaf3"]),
    )
    topology = from_response(response, where="t")
    files = render_files(_cluster("p5.48xlarge", topology=topology))
    assert "TopologyPlugin=topology/tree" in files["slurm.conf"].splitlines()
    assert files["topology.conf"].splitlines()[2:] == [
        "SwitchName=nn-leaf1",
        "SwitchName=nn-leaf2",
        "SwitchName=nn-leaf3",
        "SwitchName=nn-mid1 Switches=nn-leaf1,nn-leaf2",
        "SwitchName=nn-mid2 Switches=nn-leaf3",
        "SwitchName=nn-top Switches=nn-mid1,nn-mid2",
    ]
    assert topology.leaf_of("i-2") == "nn-leaf2"
    deep = from_response(
        {
            "CapacityReservations": [
                {
                    "CapacityReservationId": "cr-1",
                    "InstanceType": "p6-b200.48xlarge",
                    "NetworkNodes": ["a", "b", "c", "d"],
                }
            ]
        },
        where="t",
    )
    assert deep.leaves == frozenset({"d"}) and deep.children["a"] == frozenset({"b"})


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ({}, "not a topology response"),
        ({"Instances": []}, "lists no instances"),
        ({"Instances": [{"InstanceId": "i-1", "NetworkNodes": []}]}, "non-empty list"),
        (_instances(("i-1", ["a", "b", "c"]), ("i-2", ["x", "b", "d"])), "one parent per node"),
        (
            {
                "Instances": [
                    {"InstanceId": "i-1", "InstanceType": "p5.48xlarge", "NetworkNodes": ["a", "b", "c"]},
                    {
                        "InstanceId": "i-2",
                        "InstanceType": "p6-b200.48xlarge",
                        "NetworkNodes": ["a", "b", "c", "d"],
                    },
                ]
            },
            "the layers disagree",
        ),
    ],
)
def test_malformed_topology_is_refused(response: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        from_response(response, where="saved.json")


def test_fetching_topology_asks_100_ids_a_call_and_follows_pages() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    ids = [f"i-{n:017x}" for n in range(MAX_IDS_PER_CALL + 5)]

    def entry(instance: str) -> dict[str, object]:
        return {
            "InstanceId": instance,
            "InstanceType": "p5.48xlarge",
            "NetworkNodes": ["nn-1", "nn-2", "nn-3"],
        }

    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [entry(i) for i in ids[:50]], "NextToken": "page2"},
            {"InstanceIds": ids[:MAX_IDS_PER_CALL]},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [entry(i) for i in ids[50:MAX_IDS_PER_CALL]]},
            {"InstanceIds": ids[:MAX_IDS_PER_CALL], "NextToken": "page2"},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [entry(i) for i in ids[MAX_IDS_PER_CALL:]]},
            {"InstanceIds": ids[MAX_IDS_PER_CALL:]},
        )
        response = fetch_instance_topology(ec2, ids)
        stub.assert_no_pending_responses()
    assert [item["InstanceId"] for item in response["Instances"]] == ids
    assert from_response(response, where="aws").leaves == frozenset({"nn-3"})


def test_render_command_writes_the_stack_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps(_instances(("i-1", ["nn-1", "nn-2", "nn-3"]))), encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        [
            "scheduler",
            "render",
            str(STACKS),
            "--stack",
            "p5-prod",
            "--out",
            str(out),
            "--topology",
            str(topology),
        ]
    )
    assert code == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "cgroup.conf",
        "gpuforge-accounts.json",
        "gres.conf",
        "slurm.conf",
        "slurmd-register.conf",
        "slurmdbd.conf",
        "topology.conf",
    ]
    conf = (out / "slurm.conf").read_text(encoding="utf-8").splitlines()
    assert "SlurmctldHost=p5-prod-slurmctld(10.0.0.10)" in conf
    assert "wrote" in capsys.readouterr().out
    # The node definition each GPU node passes to `slurmd -Z --conf`: the one function the user data uses.
    register = (out / "slurmd-register.conf").read_text(encoding="utf-8").splitlines()
    cluster = stack_cluster(load_stack_config(STACKS, "p5-prod"))
    assert register[-1] == node_registration(cluster)
    assert register[-1].startswith("CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 ")
    assert "Gres=gpu:h100:8 Feature=p5.48xlarge,capacity-block,h100" in register[-1]
    assert all(line.startswith("#") for line in register[:-1])
    assert "Topology=default:<its leaf switch>" in "\n".join(register)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slurm-version", "25.11.7"], "pins Slurm 26.05.5"),
        (["--topology", "/nonexistent.json"], "no such file"),
    ],
)
def test_render_command_refuses_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out = tmp_path / "out"
    assert main(["scheduler", "render", str(STACKS), "--stack", "p5-prod", "--out", str(out), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_render_command_refuses_a_stack_without_slurm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scheduler", "render", str(STACKS), "--stack", "dev", "--out", str(tmp_path)]) == 2
    assert "has no Slurm scheduler" in capsys.readouterr().err


def test_a_health_check_interval_slurmd_refuses_is_refused() -> None:
    with pytest.raises(InputError, match="above HealthCheckTimeout"):
        SlurmSite(controller_host="h", controller_addr="10.0.0.10", health_check_interval_s=60)


def test_a_topology_without_switches_is_refused_as_slurmctld_would() -> None:
    from gpuforge.scheduler.topology import NetworkTopology

    with pytest.raises(InputError, match="no switches stops slurmctld"):
        render_files(_cluster("p5.48xlarge", topology=NetworkTopology(children={})))
    pending = render_files(_cluster("p5.48xlarge", topology=NetworkTopology.pending("t")))["topology.conf"]
    assert pending.splitlines()[-1] == "SwitchName=t-unplaced"


def test_sync_topology_without_aws_exits_1_naming_the_permissions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    argv = [
        "scheduler",
        "sync-topology",
        "--cluster",
        "cl",
        "--instance-type",
        "p5.48xlarge",
        "--region",
        "us-east-1",
    ]
    assert main([*argv, "--topology-conf", str(tmp_path / "topology.conf")]) == 1
    assert "ec2:DescribeInstanceTopology" in capsys.readouterr().err
    assert not (tmp_path / "topology.conf").exists()


def test_slurm_conf_runs_gpuforge_s_prolog_and_epilog() -> None:
    """slurmd runs the job mapping commands the image installs (images/scripts/85-gpuforge.sh)."""
    conf = render_files(_cluster("p5.48xlarge"))["slurm.conf"].splitlines()
    assert "Prolog=/usr/local/sbin/gpuforge-slurm-prolog" in conf
    assert "Epilog=/usr/local/sbin/gpuforge-slurm-epilog" in conf
    with pytest.raises(InputError, match=r"SlurmSite\.prolog"):
        SlurmSite(controller_host="h", controller_addr="10.0.0.10", prolog="/usr/local/sbin/p\nEpilog=/x")


@pytest.mark.parametrize(
    ("version", "served"), [("25.05.6", False), ("25.11.0", True), ("25.11.7", True), ("26.05.5", True)]
)
def test_slurmctld_metrics_are_on_where_the_version_has_them(version: str, served: bool) -> None:
    """MetricsType=metrics/openmetrics from 25.11.0 (CHANGELOG/slurm-25.11.md, 25.11.0rc1), never before."""
    conf = render_files(_cluster("p5.48xlarge", version=version))["slurm.conf"].splitlines()
    assert ("MetricsType=metrics/openmetrics" in conf) is served
    assert any(line.startswith("MetricsType") for line in conf) is served
