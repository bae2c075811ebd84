"""The rendered config, run by real Slurm daemons: a controller and three GPU nodes in namespaces.

What is proved here with real slurmctld and slurmd (the version of the Slurm test root,
which must be the series the shipped matrices pin): the files `render_files` writes are
accepted; dynamic nodes registering with `node_registration` come up idle with their GRES
and features; `srun -N2 --gres=gpu:<type>:2` runs on both with the GPUs it was given; a
job asking for more nodes than are up stays pending and starts whole once they are; the
node agent, run by slurmd as HealthCheckProgram, drains a failing node with its reason
while the running job goes on and no new job lands there; a node that leaves is gone;
a setting the installed Slurm does not know stops the controller.

The node's hardware line is the test machine's own (read from `slurmd -C`, so Slurm's
checks against the real CPUs and memory pass); the GPUs are device files with NVIDIA's
major number. Nothing else differs from a real cluster's files but paths and ports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from slurm_cluster import (
    AGENT_DIR,
    DEFAULT_ROOT,
    DEVICE_PREFIX,
    FAULTY_DIR,
    HEALTH_CHECK,
    HOLD_DIR,
    JOB_MAP_DIR,
    REPO,
    UNTIL_CANCELLED,
    ClusterError,
    SlurmTestCluster,
    node_is_empty,
    open_cluster,
    read_by_slurmctld,
    this_machine,
    unavailable_reason,
)

from gpuforge import hardware
from gpuforge.components.specs import PartitionSpec, SchedulerSpec
from gpuforge.images.matrix import load_valid
from gpuforge.scheduler import versions
from gpuforge.scheduler.render import (
    SlurmCluster,
    SlurmSite,
    node_registration,
    render_files,
    topology_argument,
)
from gpuforge.scheduler.sync import sync_topology
from gpuforge.scheduler.topology import NetworkTopology, from_response

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

GPUS_PER_NODE = 2
CONTROLLER = "gfctl"
MANIFEST = REPO / "tests/fixtures/node/manifest/p5-h100.json"

# The health check slurmd runs: the node agent, for the nodes a test marked faulty. A
# healthy node of this machine has no GPUs for the agent to find, so the flag stands for
# "this node's hardware is broken"; what drains it is the agent's own verdict and reason.
HEALTH_SCRIPT = f"""#!/bin/sh
[ -e {FAULTY_DIR}/"$SLURMD_NODENAME" ] || exit 0
cp {AGENT_DIR}/manifest.json /tmp/manifest-"$SLURMD_NODENAME".json
PYTHONPATH={AGENT_DIR} exec python3 -c 'import sys; from gpuforge.cli import main; sys.exit(main())' \\
    node check --slurm --manifest /tmp/manifest-"$SLURMD_NODENAME".json --expect p5.48xlarge \\
    --node-name "$SLURMD_NODENAME"
"""


def _this_machine(cluster: SlurmTestCluster) -> hardware.InstanceType:
    """p5.48xlarge's catalog row with this machine's CPUs and memory, and two GPUs on one NUMA node."""
    return this_machine(cluster, GPUS_PER_NODE)


def start_small_cluster(
    test_cluster: SlurmTestCluster, name: str, *, max_nodes: int = 2, topology: NetworkTopology | None = None
) -> SlurmCluster:
    """A rendered cluster of this machine's nodes, its files written and its controller started."""
    spec = SlurmCluster(
        name=name,
        instance_type=_this_machine(test_cluster),
        capacity_type="on-demand",
        max_nodes=max_nodes,
        scheduler=SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge"),
        slurm_version=test_cluster.chroot(["slurmd", "-V"]).stdout.split()[-1],
        site=SlurmSite(
            controller_host=CONTROLLER,
            controller_addr=test_cluster.address(1),
            gpu_device_prefix=DEVICE_PREFIX,
        ),
        topology=topology,
    )
    test_cluster.make_gpus(GPUS_PER_NODE)
    test_cluster.write_key()
    test_cluster.write_files(dict(render_files(spec)))
    test_cluster.start_controller(CONTROLLER)
    return spec


def _pinned_slurm() -> str:
    matrix, _ = load_valid(REPO / "images/matrices/p5-h100-cuda12.yaml")
    assert matrix.slurm is not None, "the p5-prod matrix pins Slurm"
    return matrix.slurm.version


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmTestCluster, SlurmCluster]]:
    with open_cluster(tmp_path_factory.mktemp("slurm"), ROOT, REPO / "gpuforge") as test_cluster:
        installed = test_cluster.chroot(["slurmd", "-V"]).stdout.split()[-1]
        pinned = _pinned_slurm()
        assert versions.series_of(versions.parse_version(installed, where="slurmd -V")) == versions.series_of(
            versions.parse_version(pinned, where="matrix")
        ), f"the Slurm test root runs {installed}, the matrices pin {pinned}: rebuild the root or re-pin"
        spec = SlurmCluster(
            name="gftest",
            instance_type=_this_machine(test_cluster),
            capacity_type="capacity-block",
            max_nodes=8,
            scheduler=SchedulerSpec(
                type="slurm",
                controller_instance_type="m7i.2xlarge",
                partitions=(
                    PartitionSpec(name="gpu", max_time="2-00:00:00", default=True),
                    PartitionSpec(name="debug"),
                ),
            ),
            slurm_version=installed,
            site=SlurmSite(
                controller_host=CONTROLLER,
                controller_addr=test_cluster.address(1),
                gpu_device_prefix=DEVICE_PREFIX,
                health_check_program=HEALTH_CHECK,
                health_check_interval_s=65,
            ),
        )
        test_cluster.make_gpus(GPUS_PER_NODE)
        test_cluster.write_key()
        test_cluster.write_files(dict(render_files(spec)))
        script = test_cluster.root / HEALTH_CHECK.lstrip("/")
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(HEALTH_SCRIPT, encoding="utf-8")
        script.chmod(0o755)
        (test_cluster.root / AGENT_DIR.lstrip("/") / "manifest.json").write_bytes(MANIFEST.read_bytes())
        test_cluster.start_controller(CONTROLLER)
        yield test_cluster, spec


def _name(test_cluster: SlurmTestCluster, number: int) -> str:
    """Node names unique to the cluster: the host's cgroup tree names jobs by node and job id,
    so two test clusters side by side must not share node names."""
    return f"{test_cluster.tag}-gpu{number}"


def _idle(node: dict[str, str]) -> bool:
    """Idle, not drained, nothing completing: a node that takes the next job."""
    return node.get("State") == "IDLE+DYNAMIC_NORM"


def _registered(node: dict[str, str]) -> bool:
    """Registered and idle (drained or not): a node that has just joined."""
    return "IDLE" in node.get("State", "")


def test_nodes_register_by_themselves_idle_with_gres_and_features(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    test_cluster, spec = cluster
    conf = node_registration(spec)
    names = [_name(test_cluster, 1), _name(test_cluster, 2)]
    for index, name in zip((11, 12), names, strict=True):
        test_cluster.start_node(name, index, conf)
    # (S:0): Slurm bound the GPUs to socket 0's cores, from gres.conf's Cores= lines.
    gres = f"gpu:{spec.gpu_type}:{GPUS_PER_NODE}(S:0)"
    for name in names:
        test_cluster.wait_node(
            name, f"idle with {gres}", lambda node: _idle(node) and node.get("Gres") == gres
        )
        node = test_cluster.node(name)
        assert node["AvailableFeatures"] == ",".join(spec.features)
        assert node["RealMemory"] == str(spec.real_memory_mib)
    partitions = test_cluster.client(["sinfo", "-h", "-o", "%P %D %l"]).stdout.split("\n")
    assert "gpu* 2 2-00:00:00" in partitions and "debug 2 infinite" in partitions


def test_srun_runs_on_both_nodes_with_the_gpus_it_was_given(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    test_cluster, spec = cluster
    done = test_cluster.client(
        [
            "srun",
            "-N2",
            f"--gres=gpu:{spec.gpu_type}:{GPUS_PER_NODE}",
            "--chdir=/tmp",
            "sh",
            "-c",
            'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"',
        ]
    )
    assert sorted(done.stdout.split("\n")[:-1]) == [f"{_name(test_cluster, n)} 0,1" for n in (1, 2)]


def _mapping(test_cluster: SlurmTestCluster, node: str) -> dict[str, str]:
    """The node's dcgm-exporter job mapping files (JOB_MAP_DIR/<node>) as GPU index -> content.

    Only the files dcgm-exporter reads (named by GPU index): the atomic writer's hidden
    temporary file may be there for a moment, and is not a mapping."""
    folder = test_cluster.root / JOB_MAP_DIR.lstrip("/") / node
    if not folder.is_dir():
        return {}
    return {path.name: path.read_text() for path in folder.iterdir() if not path.name.startswith(".")}


def test_the_prolog_maps_each_job_s_gpus_and_the_epilog_removes_them(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    """Two jobs share a node, one GPU each: slurmd's Prolog (`gpuforge node prolog`, from
    SLURM_JOB_GPUS) writes each job's file, and the Epilog removes each job's own, only."""
    test_cluster, spec = cluster
    node = _name(test_cluster, 1)
    first = test_cluster.sbatch(
        "-N1", "-w", node, "--mem=64", f"--gres=gpu:{spec.gpu_type}:1", "--wrap", UNTIL_CANCELLED
    )

    def mapping() -> dict[str, str]:
        return _mapping(test_cluster, node)

    test_cluster.wait_for("the first job's mapping", mapping, lambda files: len(files) == 1)
    second = test_cluster.sbatch(
        "-N1", "-w", node, "--mem=64", f"--gres=gpu:{spec.gpu_type}:1", "--wrap", UNTIL_CANCELLED
    )
    test_cluster.wait_for("the second job's mapping", mapping, lambda files: len(files) == 2)
    assert sorted(_mapping(test_cluster, node).values()) == sorted([f"{first}\n", f"{second}\n"])
    assert set(_mapping(test_cluster, node)) == {"0", "1"}
    assert test_cluster.job(first)["JobState"] == test_cluster.job(second)["JobState"] == "RUNNING"
    test_cluster.client(["scancel", first])
    test_cluster.wait_for("the first job's epilog", mapping, lambda files: len(files) == 1)
    assert list(_mapping(test_cluster, node).values()) == [f"{second}\n"]
    test_cluster.client(["scancel", second])
    test_cluster.wait_for("the second job's epilog", mapping, lambda files: files == {})
    test_cluster.wait_node(node, "idle", _idle)


def test_a_job_wider_than_the_cluster_waits_then_starts_whole(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    test_cluster, spec = cluster
    job = test_cluster.sbatch("-N3", f"--gres=gpu:{spec.gpu_type}:1", "--wrap", "srun hostname")
    test_cluster.wait_job(job, "judged", lambda shown: shown["Reason"] != "None")
    waiting = test_cluster.job(job)
    assert waiting["JobState"] == "PENDING", waiting
    assert waiting["NodeList"] in {"", "(null)"}, waiting  # nothing held while it waits
    test_cluster.start_node(_name(test_cluster, 3), 13, node_registration(spec))
    test_cluster.wait_job(job, "completed", lambda shown: shown["JobState"] == "COMPLETED")
    assert test_cluster.job(job)["NodeList"] == f"{test_cluster.tag}-gpu[1-3]"
    test_cluster.wait_empty(*(_name(test_cluster, number) for number in (1, 2, 3)))


def test_failing_health_check_drains_the_node_keeps_its_job_and_new_jobs_off(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    test_cluster, spec = cluster
    node = _name(test_cluster, 3)
    running = test_cluster.sbatch("-N1", "-w", node, "--wrap", UNTIL_CANCELLED)
    test_cluster.wait_job(running, "running", lambda shown: shown["JobState"] == "RUNNING")
    faulty = test_cluster.root / FAULTY_DIR.lstrip("/") / node
    faulty.touch()
    test_cluster.wait_for(
        "the health check to drain node 3",
        lambda: test_cluster.node(node),
        lambda shown: "DRAIN" in shown.get("State", ""),
        beyond_s=spec.site.health_check_interval_s,  # slurmd runs the check once per interval
    )
    reasons = test_cluster.client(["sinfo", "-R", "-h", "-o", "%N|%E"]).stdout
    assert re.search(rf"^{node}\|gpuforge: \S", reasons, re.M), reasons
    still = test_cluster.job(running)
    assert still["JobState"] == "RUNNING", still
    blocked = test_cluster.sbatch("-N1", "-w", node, "--wrap", "true")
    test_cluster.wait_job(blocked, "judged", lambda shown: shown["Reason"] != "None")
    assert test_cluster.job(blocked)["JobState"] == "PENDING"
    test_cluster.client(["scancel", running, blocked])
    # The node as the test found it: its jobs done (Epilog included), healthy and taking jobs.
    faulty.unlink()
    test_cluster.wait_empty(node)
    test_cluster.client(["scontrol", "update", f"nodename={node}", "state=resume"])
    test_cluster.wait_node(node, "idle", _idle)


def test_a_node_that_leaves_is_gone(cluster: tuple[SlurmTestCluster, SlurmCluster]) -> None:
    """A node leaves once its last job is done, Epilog included. Until then it is IDLE+COMPLETING:
    not ALLOCATED, yet `scontrol delete` refuses it as busy, and a slurmd stopped meanwhile never
    reports the Epilog done. The Epilog is held here, as a loaded machine's slow Python start holds
    it (CI saw "Requested nodes are busy"), so that the node is COMPLETING when the test begins to
    take it away."""
    test_cluster, _ = cluster
    node = _name(test_cluster, 3)
    hold = test_cluster.root / HOLD_DIR.lstrip("/") / "epilog" / node
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    job = test_cluster.sbatch("-N1", "-w", node, "--wrap", "true")
    completing = test_cluster.wait_node(
        node,
        f"completing job {job} (Epilog held)",
        lambda shown: (
            shown.get("State", "").split("+")[0] == "IDLE" and "COMPLETING" in shown.get("State", "")
        ),
    )
    assert not node_is_empty(completing), completing  # the proxy "not ALLOCATED" holds; the node is busy
    hold.unlink()
    test_cluster.wait_empty(node)
    test_cluster.stop(node)
    test_cluster.client(["scontrol", "delete", f"nodename={node}"])
    assert test_cluster.node(node) == {}
    names = test_cluster.client(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()
    assert sorted(set(names)) == [_name(test_cluster, 1), _name(test_cluster, 2)]


def test_a_node_claiming_more_gpus_than_it_has_is_refused(
    cluster: tuple[SlurmTestCluster, SlurmCluster],
) -> None:
    test_cluster, spec = cluster
    claim = node_registration(spec).replace(f"gpu:{spec.gpu_type}:{GPUS_PER_NODE}", f"gpu:{spec.gpu_type}:4")
    node = _name(test_cluster, 4)
    test_cluster.start_node(node, 14, claim)
    test_cluster.wait_for(
        "node 4 to be judged",
        lambda: not test_cluster.alive(node) or "INVAL" in test_cluster.node(node).get("State", ""),
    )
    state = test_cluster.node(node).get("State", "")
    assert not test_cluster.alive(node) or "INVAL" in state or "DRAIN" in state, state
    test_cluster.stop(node)


def test_a_setting_the_installed_slurm_does_not_know_stops_the_controller(tmp_path: Path) -> None:
    with open_cluster(tmp_path, ROOT, REPO / "gpuforge") as test_cluster:
        site = SlurmSite(controller_host=CONTROLLER, controller_addr=test_cluster.address(1))
        spec = SlurmCluster(
            name="gfbad",
            instance_type=hardware.get("p5.48xlarge"),
            capacity_type="on-demand",
            max_nodes=2,
            scheduler=SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge"),
            slurm_version=test_cluster.chroot(["slurmd", "-V"]).stdout.split()[-1],
            site=site,
        )
        files = dict(render_files(spec))
        files["slurm.conf"] += "GpuforgeNoSuchSetting=1\n"
        test_cluster.write_key()
        test_cluster.write_files(files)
        with pytest.raises(ClusterError, match="exited while waiting"):
            test_cluster.start_controller(CONTROLLER)
        assert "GpuforgeNoSuchSetting" in test_cluster.daemon_log("ctl")


def test_slurmctld_reads_the_prolog_epilog_and_metrics_settings(tmp_path: Path) -> None:
    """The rendered slurm.conf of the pinned Slurm, read by the real slurmctld: Prolog, Epilog and
    MetricsType=metrics/openmetrics as gpuforge wrote them, and no error in its log."""
    with open_cluster(tmp_path, ROOT, REPO / "gpuforge") as test_cluster:
        address = "10.0.0.10"
        spec = SlurmCluster(
            name="gfmetrics",
            instance_type=hardware.get("p5.48xlarge"),
            capacity_type="on-demand",
            max_nodes=2,
            scheduler=SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge"),
            slurm_version=test_cluster.chroot(["slurmd", "-V"]).stdout.split()[-1],
            site=SlurmSite(controller_host=CONTROLLER, controller_addr=address),
        )
        test_cluster.write_key()
        read = read_by_slurmctld(test_cluster, dict(render_files(spec)), host=CONTROLLER, address=address)
    assert read.accepted and not read.errors, read.log[-3000:]
    shown = {key: value for key, value in read.config.items() if key.startswith(("Prolog[", "Epilog["))}
    assert shown == {"Prolog[0]": spec.site.prolog, "Epilog[0]": spec.site.epilog}
    assert read.config["MetricsType"] == "metrics/openmetrics"


def test_a_node_joins_its_leaf_switch_of_the_aws_topology(tmp_path: Path) -> None:
    response = {
        "Instances": [
            {
                "InstanceId": "i-1",
                "InstanceType": "p5.48xlarge",
                "NetworkNodes": ["nn-top", "nn-mid", "nn-leaf1"],
            },
            {
                "InstanceId": "i-2",
                "InstanceType": "p5.48xlarge",
                "NetworkNodes": ["nn-top", "nn-mid", "nn-leaf2"],
            },
        ]
    }
    with open_cluster(tmp_path, ROOT, REPO / "gpuforge") as test_cluster:
        spec = start_small_cluster(test_cluster, "gftopo", topology=from_response(response, where="test"))
        node = _name(test_cluster, 1)
        test_cluster.start_node(node, 11, f"{node_registration(spec)} {topology_argument('nn-leaf2')}")
        test_cluster.wait_node(node, "registered", _registered)
        tree = test_cluster.client(["scontrol", "show", "topology"]).stdout
        assert re.search(rf"^SwitchName=nn-leaf2 Level=0 .*Nodes={node}$", tree, re.M), tree
        assert re.search(r"^SwitchName=nn-leaf1 Level=0 .*Nodes=$", tree, re.M), tree
        assert re.search(r"^SwitchName=nn-top Level=2 .*Switches=nn-mid$", tree, re.M), tree


def test_the_controller_places_unplaced_nodes_under_the_leaves_aws_reports(tmp_path: Path) -> None:
    """`sync_topology` against real slurmctld, with EC2's answers from botocore's Stubber."""
    with open_cluster(tmp_path, ROOT, REPO / "gpuforge") as test_cluster:
        spec = start_small_cluster(test_cluster, "gfsync", topology=NetworkTopology.pending("gfsync"))
        nodes = [_name(test_cluster, 1), _name(test_cluster, 2)]
        for index, node in zip((11, 12), nodes, strict=True):
            test_cluster.start_node(node, index, node_registration(spec))
        for node in nodes:
            test_cluster.wait_node(node, "registered", _registered)
        srun = ["srun", "-N2", "--chdir=/tmp", "true"]
        unplaced = test_cluster.client(srun, check=False)
        assert unplaced.returncode != 0 and "not available" in unplaced.stderr, unplaced

        # Node names stand in for instance ids: gpuforge names each Slurm node after its instance.
        ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        instances = {"Reservations": [{"Instances": [{"InstanceId": node} for node in nodes]}]}
        topology = {
            "Instances": [
                {
                    "InstanceId": nodes[0],
                    "InstanceType": "p5.48xlarge",
                    "NetworkNodes": ["nn-top", "nn-mid", "nn-leaf1"],
                },
                {
                    "InstanceId": nodes[1],
                    "InstanceType": "p5.48xlarge",
                    "NetworkNodes": ["nn-top", "nn-mid", "nn-leaf2"],
                },
            ]
        }

        def scontrol(args: Sequence[str]) -> str:
            return test_cluster.client(["scontrol", *args]).stdout

        conf = test_cluster.root / "etc/slurm/topology.conf"
        with Stubber(ec2) as stub:
            for _ in range(2):
                stub.add_response("describe_instances", instances)
                stub.add_response("describe_instance_topology", topology, {"InstanceIds": nodes})
            first = sync_topology(
                ec2, scontrol, cluster="gfsync", instance_type="p5.48xlarge", topology_conf=conf
            )
            second = sync_topology(
                ec2, scontrol, cluster="gfsync", instance_type="p5.48xlarge", topology_conf=conf
            )
            stub.assert_no_pending_responses()
        assert first.switches_added == ("nn-leaf1", "nn-leaf2", "nn-mid", "nn-top")
        assert first.placed == {nodes[0]: "nn-leaf1", nodes[1]: "nn-leaf2"}
        assert second.switches_added == () and second.placed == {}
        tree = test_cluster.client(["scontrol", "show", "topology"]).stdout
        assert re.search(rf"^SwitchName=nn-leaf1 Level=0 .*Nodes={nodes[0]}$", tree, re.M), tree
        assert re.search(r"^SwitchName=gfsync-unplaced Level=0 .*Nodes=$", tree, re.M), tree
        test_cluster.client(srun)  # placed: the 2-node job runs
