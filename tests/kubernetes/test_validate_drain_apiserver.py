"""`gpuforge validate --drain` on a Kubernetes stack drains through the node agent's path, on a real kube-apiserver.

The server is kube_cluster.py's. No scheduler, kubelet or Kueue runs there, so the acceptance's Jobs are never
admitted: each diag ends at its timeout, a failure, and the node is drained for it, which is what `--drain` does
with a node whose diag failed. The tests act for the absent controllers as test_node_drain_apiserver.py does
(the disruption controller's budget status); the Auto Scaling group is moto's, as in tests/node/test_node_asg.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kube_cluster import REPO, ApiServer, open_api_server
from kubernetes import client, config

sys.path.append(str(REPO / "tests/node"))
from test_node_asg import REGION, group_with_one_instance, health
from test_node_drain_apiserver import Clock, allow_disruptions, make_namespace, make_pod

from gpuforge.cli import main
from gpuforge.kubernetes.addons import pins
from gpuforge.node.kubernetes import CONDITION_TYPE, REPORTED_ANNOTATION, TAINT_KEY, KubernetesAgent
from gpuforge.validate.dcgm import DiagRun
from gpuforge.validate.floors import floors_for
from gpuforge.validate.kubernetes_drain import drain_failed_nodes
from gpuforge.validate.report import DiagVerdict, Report
from gpuforge.validate.run import DIAG_CHECK, failed_nodes

pytestmark = pytest.mark.slow
DIGEST = "sha256:" + "ab" * 32
STACK_ARGS = ["validate", str(REPO / "stacks" / "training"), "--stack", "p5-eks"]


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with open_api_server(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture(scope="module")
def core(api_server: ApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(api_server.kubeconfig)))


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_server: str) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


def stack_node(core: client.CoreV1Api, name: str, instance_id: str, *, unschedulable: bool = False) -> None:
    """A Ready node of p5-eks's GPU node group, as EKS registers it (providerID aws:///<zone>/<instance>)."""
    labels = {pins().node_labels.node_group: "p5-eks-gpu"}
    spec: dict[str, Any] = {"providerID": f"aws:///{REGION}a/{instance_id}", "unschedulable": unschedulable}
    core.create_node({"metadata": {"name": name, "labels": labels}, "spec": spec})
    core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})


def diag_failed(node: str) -> Report:
    run = DiagRun(problems=["Diagnostic test 'pcie' failed on GPU 3"])
    return Report(floors_for("p5.48xlarge"), 1, diag=[DiagVerdict(f"diag:{node}", run)])


def test_validate_drain_cordons_taints_and_replaces_a_node_whose_diag_failed(
    api_server: ApiServer,
    core: client.CoreV1Api,
    aws: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not any(item.metadata.name == "llm" for item in core.list_namespace().items):
        core.create_namespace({"metadata": {"name": "llm"}})
    autoscaling, instance_id = group_with_one_instance("p5-eks-gpu")
    stack_node(core, "gpu-bad", instance_id)
    monkeypatch.setenv("KUBECONFIG", str(api_server.kubeconfig))
    code = main([*STACK_ARGS, "--image", f"r.invalid/x@{DIGEST}", "--timeout", "1", "--drain", "--json"])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "validate: drained gpu-bad" in err and "diag:gpu-bad" in out
    node = core.read_node("gpu-bad")
    assert node.spec.unschedulable is True
    assert (TAINT_KEY, DIAG_CHECK, "NoSchedule") in {(t.key, t.value, t.effect) for t in node.spec.taints}
    (condition,) = [c for c in node.status.conditions if c.type == CONDITION_TYPE]
    # The reason as Slurm's validate --drain writes it for the same failure (cut to Slurm's 80 characters).
    assert condition.message.startswith("gpuforge: validate: dcgmi diag: the diag step on gpu-bad failed")
    assert len(condition.message) <= 80
    assert health(autoscaling, instance_id).upper() == "UNHEALTHY"
    assert node.metadata.annotations[REPORTED_ANNOTATION] == instance_id


def test_the_reason_is_the_one_slurm_drains_with_and_a_budget_is_honoured(
    core: client.CoreV1Api, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    autoscaling, instance_id = group_with_one_instance("p5-eks-gpu-pdb")
    stack_node(core, "gpu-pdb", instance_id)
    make_namespace(core, "vision")
    make_pod(core, "vision", "train-0", "gpu-pdb")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": "vision"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    policy = client.PolicyV1Api(core.api_client)
    policy.create_namespaced_pod_disruption_budget("vision", budget)
    allow_disruptions(policy, "vision", "train", 0)
    clock = Clock(lambda _: None)

    def agent(**fields: Any) -> KubernetesAgent:
        return KubernetesAgent(**fields, retry_s=5, clock=clock.clock, sleep=clock.sleep)

    report = diag_failed("gpu-pdb")
    drained = drain_failed_nodes(
        core,
        report,
        region=REGION,
        instance_type="p5.48xlarge",
        progress=print,
        budget_s=10,
        make_agent=agent,
    )
    assert drained == ["gpu-pdb"]
    node = core.read_node("gpu-pdb")
    (condition,) = [c for c in node.status.conditions if c.type == CONDITION_TYPE]
    assert condition.message == failed_nodes(report)[0].reason
    assert (
        condition.message == "gpuforge: validate: dcgmi diag: Diagnostic test pcie failed on GPU 3"
    )  # quotes dropped, as clean_reason does for Slurm
    # The budget allows no disruption: the pod runs on and the node is not reported (its agent finishes later).
    assert core.read_namespaced_pod("train-0", "vision").metadata.deletion_timestamp is None
    assert clock.sleeps == 2
    assert health(autoscaling, instance_id).upper() == "HEALTHY"
    assert "1 pod(s) not evicted yet (vision/train-0): not reported yet" in capsys.readouterr().err


def test_a_node_cordoned_meanwhile_keeps_its_cordon_and_is_not_reported(
    core: client.CoreV1Api, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    autoscaling, instance_id = group_with_one_instance("p5-eks-gpu-admin")
    stack_node(core, "gpu-admin", instance_id, unschedulable=True)
    drained = drain_failed_nodes(
        core, diag_failed("gpu-admin"), region=REGION, instance_type="p5.48xlarge", progress=print
    )
    assert drained == []
    node = core.read_node("gpu-admin")
    assert TAINT_KEY not in {t.key for t in node.spec.taints or []}
    assert health(autoscaling, instance_id).upper() == "HEALTHY"
    assert "gpu-admin is cordoned already; left as it is" in capsys.readouterr().out


def test_a_node_without_an_aws_provider_id_is_an_error_before_it_is_touched(core: client.CoreV1Api) -> None:
    from gpuforge.node.kubernetes import KubernetesDrainError

    core.create_node({"metadata": {"name": "gpu-noid"}})
    with pytest.raises(KubernetesDrainError, match=r"gpu-noid: spec.providerID is ''.*Fix:"):
        drain_failed_nodes(
            core, diag_failed("gpu-noid"), region=REGION, instance_type="p5.48xlarge", progress=print
        )
    assert not core.read_node("gpu-noid").spec.unschedulable
