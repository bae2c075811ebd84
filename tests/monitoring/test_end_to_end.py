"""End to end: an Xid on a GPU that a running job holds drains its node in real Slurm, the job
finishes, and the node agent then reports the idle node for replacement.

Real parts: slurmctld and slurmd 26.05.5 (the namespace cluster of tests/scheduler/slurm_cluster.py,
one node with two fake GPUs, gpuforge's Prolog and Epilog writing dcgm-exporter's job mapping
files), the pinned Prometheus (3.13) with gpuforge's rendered alert and recording rules, Alertmanager 0.33.1
with the rendered alertmanager.yml, gpuforge's drain receiver (in this process, its scontrol
calls run in the controller's namespace) and the node agent's SlurmAgent.

Adapted, and why: EC2 service discovery cannot run here, so prometheus.yml's dcgm-exporter job
gets a static target (the stand-in below) that carries `__meta_ec2_instance_id`, the label EC2
service discovery gives a target, and keeps the rendered relabel_configs, so the `node` label the
alert rules group by comes from the rendered relabelling (instance id -> `node`), as on a cluster;
scrape and rule intervals are 1 s and Alertmanager's group_wait 1 s, so the test takes seconds,
not minutes; the rules are rendered for the captured node's GPUs (eight); the webhook URL names the test
receiver's port.

The stand-in dcgm-exporter is this test's HTTP server on 127.0.0.1, served as
`text/plain; version=0.0.4`. It serves CAPTURED dcgm-exporter output,
tests/fixtures/monitoring/dcgm-exporter-h100-driver-580.105.08.txt (eight H100 80GB HBM3 GPUs on
EKS; source and what the capture holds in that folder's README.md): every captured line as
published, its labels and values untouched, with two additions per GPU (label `gpu`):
- `hpc_job`, read as dcgm-exporter reads it, from the job mapping file named by the GPU's index
  that gpuforge's prolog wrote, appended to each of that GPU's lines (replacing any `hpc_job`);
- one DCGM_FI_DEV_XID_ERRORS line, which the capture LACKS (its collector kept only six
  DCGM_FI_DEV_* names): the GPU's own captured label set, value 0 or the Xid the test injects.
The capture's GPU count (eight) is what is served; the job holds two of them.

Every daemon is started by this test and stopped by its own pid; every wait polls the state it needs
(tests/waiting.py's one bound). The job holds its GPUs until the test releases it, not for a guessed time:
under load the drain can take longer than any fixed job would last.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from monitoring_support import SHIPPED_STACKS, alertmanager_command, tool
from monitoring_tools import free_port, running
from test_real_daemons import _get, _wait
from waiting import WAIT_S

from gpuforge.cli import main
from gpuforge.hardware import InstanceType
from gpuforge.monitoring.prometheus import DCGM_JOB, NODE_JOB
from gpuforge.monitoring.receiver import PATH, DrainReceiver, make_server
from gpuforge.monitoring.rules import ALERTS_FILE, USAGE_FILE, alert_rules, recording_rules
from gpuforge.node.context import NodeContext
from gpuforge.node.report import NodeReport
from gpuforge.node.runner import CommandResult, SubprocessRunner
from gpuforge.node.slurm import SlurmAgent
from gpuforge.scheduler.render import node_registration

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/scheduler"))  # the Slurm cluster helpers: a test folder, not a package
from slurm_cluster import (  # noqa: E402
    DEFAULT_ROOT,
    JOB_MAP_DIR,
    SlurmTestCluster,
    node_is_empty,
    open_cluster,
    unavailable_reason,
    until_released,
)
from test_slurm_daemons import _name, _this_machine, start_small_cluster  # noqa: E402

sys.path.remove(str(REPO / "tests/scheduler"))

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]
XID_GPU, XID = 1, 79
REASON = f"gpuforge: alert GpuforgeXidNodeBad xid {XID} on GPU {XID_GPU}"


CAPTURE = REPO / "tests/fixtures/monitoring/dcgm-exporter-h100-driver-580.105.08.txt"
_GPU_LABEL = re.compile(r'[{,]gpu="(\d+)"')
_HPC_JOB_LABEL = re.compile(r',?hpc_job="[^"]*"')
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


def _gpu(line: str) -> int:
    """The `gpu` label of a captured sample line: the index the mapping files are named by."""
    found = _GPU_LABEL.search(line)
    assert found is not None, f"{CAPTURE.name}: a sample line without a gpu label: {line}"
    return int(found.group(1))


class StandInExporter:
    """dcgm-exporter's /metrics for one node: the captured lines, hpc_job from the mapping files, the Xid field."""

    def __init__(self, capture: Path, mapping: Path) -> None:
        self.lines = [line for line in capture.read_text(encoding="utf-8").splitlines() if line.strip()]
        assert not any(line.startswith(f"{XID_FIELD}{{") for line in self.lines), (
            "the capture now has Xid lines"
        )
        self.gpus = sorted({_gpu(line) for line in self.lines if not line.startswith("#")})
        self.mapping = mapping
        self.xid: dict[int, int] = {}

    def _job(self, gpu: int) -> str | None:
        try:
            lines = (self.mapping / str(gpu)).read_text(encoding="utf-8").split()
        except OSError:
            return None
        return lines[0] if lines else None

    def _with_job(self, sample: str) -> str:
        """The captured line with `hpc_job` set from the mapping file of its GPU (none: no label)."""
        series, value = sample.rsplit(" ", 1)
        labels = _HPC_JOB_LABEL.sub("", series.removesuffix("}"))
        job = self._job(_gpu(sample))
        return f'{labels},hpc_job="{job}"}} {value}' if job is not None else f"{labels}}} {value}"

    def _xid_lines(self) -> list[str]:
        """One Xid line per GPU, with the labels of that GPU's first captured line; HELP and TYPE as
        gpuforge/data/monitoring_fields.yaml gives them for field 230."""
        out = [f"# HELP {XID_FIELD} Value of the last XID error encountered.", f"# TYPE {XID_FIELD} gauge"]
        for gpu in self.gpus:
            first = next(line for line in self.lines if not line.startswith("#") and _gpu(line) == gpu)
            labels = first[first.index("{") : first.rindex("} ") + 1]
            out.append(self._with_job(f"{XID_FIELD}{labels} {self.xid.get(gpu, 0)}"))
        return out

    def text(self) -> str:
        served = [line if line.startswith("#") else self._with_job(line) for line in self.lines]
        return "\n".join(served + self._xid_lines()) + "\n"


def _exporter_server(exporter: StandInExporter) -> HTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exporter.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Quiet."""

    return HTTPServer(("127.0.0.1", 0), Handler)


@dataclass
class InController:
    """The receiver's and the agent's Slurm commands, run in the controller's namespace and root."""

    prefix: tuple[str, ...]

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        result = SubprocessRunner(timeout_s=WAIT_S)([*self.prefix, *argv])
        return CommandResult(
            tuple(argv),
            result.returncode,
            result.stdout,
            result.stderr,
            missing=result.missing,
            timed_out=result.timed_out,
        )


def _configs(
    rendered: Path, out: Path, *, exporter: int, alertmanager: int, receiver: int, node: str
) -> None:
    """The rendered prometheus.yml and alertmanager.yml, adapted as the module docstring says."""
    prometheus = yaml.safe_load((rendered / "prometheus.yml").read_text(encoding="utf-8"))
    prometheus["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    prometheus["alerting"]["alertmanagers"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{alertmanager}"]}
    ]
    (dcgm,) = [job for job in prometheus["scrape_configs"] if job["job_name"] == DCGM_JOB]
    prometheus["scrape_configs"] = [
        {
            "job_name": DCGM_JOB,
            "static_configs": [
                {"targets": [f"127.0.0.1:{exporter}"], "labels": {"__meta_ec2_instance_id": node}}
            ],
            "relabel_configs": dcgm["relabel_configs"],
        }
    ]
    assert "ec2_sd_configs" in dcgm  # what was replaced; its relabelling is kept and gives `node`
    (out / "prometheus.yml").write_text(yaml.safe_dump(prometheus), encoding="utf-8")
    manager = yaml.safe_load((rendered / "alertmanager.yml").read_text(encoding="utf-8"))
    manager["route"]["group_wait"] = "1s"
    (drain,) = [item for item in manager["receivers"] if "webhook_configs" in item]
    drain["webhook_configs"][0]["url"] = f"http://127.0.0.1:{receiver}{PATH}"
    (out / "alertmanager.yml").write_text(yaml.safe_dump(manager), encoding="utf-8")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SlurmTestCluster, str, InstanceType]]:
    with open_cluster(tmp_path / "slurm", ROOT, REPO / "gpuforge") as test_cluster:
        spec = start_small_cluster(test_cluster, "gfalert", max_nodes=1)
        node = _name(test_cluster, 1)
        test_cluster.start_node(node, 11, node_registration(spec))
        test_cluster.wait_node(node, "registered", lambda shown: "IDLE" in shown.get("State", ""))
        yield test_cluster, node, _this_machine(test_cluster)


def _drained_idle(node: dict[str, str]) -> bool:
    """IDLE+DRAIN (a dynamic node adds +DYNAMIC_NORM): drained, and no job runs or completes on it."""
    return node_is_empty(node) and "DRAIN" in node["State"].split("+")


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    result = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")["data"]["result"]
    return cast(list[dict[str, Any]], result)


def test_an_xid_under_a_running_job_drains_its_node_and_the_idle_node_is_reported(
    cluster: tuple[SlurmTestCluster, str, InstanceType], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the namespace cluster and Alertmanager's template overlay need root")
    test_cluster, node, instance = cluster
    prometheus_bin = tool("prometheus")
    rendered = tmp_path / "rendered"
    assert (
        main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(rendered)]) == 0
    )
    mapping = test_cluster.root / JOB_MAP_DIR.lstrip("/") / node
    exporter = StandInExporter(CAPTURE, mapping)
    assert len(exporter.gpus) >= instance.gpu_count  # the job's GPUs are among the captured ones
    work = tmp_path / "work"
    (work / "rules").mkdir(parents=True)
    (
        work / "rules" / ALERTS_FILE
    ).write_text(  # for the captured node's GPUs, as a p5's rules are for its eight
        alert_rules(cluster="e2e", gpu_count=len(exporter.gpus), dcgm_job=DCGM_JOB, node_job=NODE_JOB),
        encoding="utf-8",
    )
    (work / "rules" / USAGE_FILE).write_text(recording_rules(cluster="e2e"), encoding="utf-8")
    exporter_server = _exporter_server(exporter)
    log: list[str] = []
    prefix = ("nsenter", f"--net=/var/run/netns/{test_cluster.tag}-ctl", "chroot", str(test_cluster.root))
    receiver_server = make_server(DrainReceiver(InController(prefix), log.append, threading.Lock()), port=0)
    threads = [
        threading.Thread(target=server.serve_forever, daemon=True)
        for server in (exporter_server, receiver_server)
    ]
    for thread in threads:
        thread.start()
    prometheus_port, alertmanager_port = free_port(), free_port()
    _configs(
        rendered,
        work,
        exporter=exporter_server.server_address[1],
        alertmanager=alertmanager_port,
        receiver=receiver_server.server_address[1],
        node=node,
    )
    prometheus_log, alertmanager_log = tmp_path / "prometheus.log", tmp_path / "alertmanager.log"
    try:
        with (
            running(
                [
                    str(prometheus_bin),
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                ],
                prometheus_log,
            ),
            running(
                alertmanager_command(
                    work / "alertmanager.yml", tmp_path / "am", alertmanager_port, tmp_path / "overlay"
                ),
                alertmanager_log,
            ),
        ):
            base = f"http://127.0.0.1:{prometheus_port}"
            job = test_cluster.sbatch(f"--gres=gpu:{instance.gpu_count}", "--wrap", until_released("e2e"))
            test_cluster.wait_job(job, "running", lambda shown: shown.get("JobState") == "RUNNING")
            # The prolog's mapping files reach Prometheus as dcgm-exporter's hpc_job label.
            held = _wait(
                "Prometheus sees the job on both GPUs",
                lambda: (
                    len(_query(base, f'DCGM_FI_DEV_XID_ERRORS{{hpc_job="{job}",node="{node}"}}'))
                    == instance.gpu_count
                ),
                prometheus_log,
            )
            assert held
            # Every captured GPU reaches Prometheus with the `node` that the rendered relabelling gives.
            temps = _query(base, f'DCGM_FI_DEV_GPU_TEMP{{node="{node}"}}')
            assert sorted(int(item["metric"]["gpu"]) for item in temps) == exporter.gpus
            exporter.xid[XID_GPU] = XID
            _wait(
                "the node drained by the alert",
                lambda: test_cluster.node(node).get("Reason", "").startswith("gpuforge:"),
                alertmanager_log,
            )
            shown = test_cluster.client(["scontrol", "show", "node", node, "--oneliner"]).stdout
            assert f"Reason={REASON} [" in shown, shown
            state = test_cluster.node(node)["State"]
            assert "DRAIN" in state and not state.startswith("IDLE"), state  # draining: the job still runs
            assert test_cluster.job(job)["JobState"] == "RUNNING"
            assert f"drained {node}: {REASON}" in log
            firing = _query(base, 'ALERTS{alertname="GpuforgeXidNodeBad",alertstate="firing"}')
            assert [item["metric"]["gpu"] for item in firing] == [str(XID_GPU)]
    finally:
        for server, thread in zip((exporter_server, receiver_server), threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join(timeout=WAIT_S)

    # The job runs to its end, untouched; the epilog leaves no mapping behind.
    test_cluster.release("e2e")
    test_cluster.wait_job(job, "completed", lambda shown: shown.get("JobState") == "COMPLETED")
    test_cluster.wait_node(node, "drained and idle", _drained_idle)
    assert sorted(path.name for path in mapping.iterdir()) == []
    # The node agent's next check: healthy here, but Slurm shows a gpuforge drain and no job, so it reports it.
    reports: list[str] = []

    def report_asg() -> str:
        reports.append(node)
        return "i-0123456789abcdef0"

    agent = SlurmAgent(node, InController(prefix), tmp_path / "drain.json", report_asg)
    healthy = NodeReport(instance_type=instance.name, checks=())
    agent.act(healthy, cast(NodeContext, None))  # a healthy report never reads the node context
    agent.act(healthy, cast(NodeContext, None))
    assert reports == [node]
    assert json.loads((tmp_path / "drain.json").read_text(encoding="utf-8"))["reason"] == REASON
    assert _drained_idle(test_cluster.node(node))  # never resumed
