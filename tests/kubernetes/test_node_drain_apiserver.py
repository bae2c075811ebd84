"""The node agent's Kubernetes drain (gpuforge.node.kubernetes) against a real kube-apiserver.

The server is kube_cluster.py's (1.35.8). It runs no controller-manager, scheduler or kubelet,
so the tests play them where the drain depends on them, between the agent's retries (its
`sleep`): the kubelet reports a pod Running and Ready and, once a pod is evicted, removes it
(delete with grace period 0, what the kubelet sends when the containers have stopped); the
disruption controller writes a PodDisruptionBudget's status. The report to the Auto Scaling
group is gpuforge.node.asg.report_unhealthy against moto's server, as tests/node/test_node_asg.py
does. The failing check and its reason come from the node tests' captured fixtures (an Xid 79).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_cluster import REPO, ApiServer, open_api_server
from kubernetes import client, config

# The node agent's scenarios and ASG helpers live with its tests (tests/node).
sys.path.append(str(REPO / "tests/node"))
from node_scenarios import context, fixture, p5_healthy
from test_node_asg import REGION, group_with_one_instance, health
from test_node_cli import run_node

from gpuforge.errors import InputError
from gpuforge.node.asg import report_unhealthy
from gpuforge.node.checks import PERIODIC_CHECKS, run_checks
from gpuforge.node.context import NodeContext
from gpuforge.node.imds import Identity
from gpuforge.node.kubernetes import (
    CONDITION_TYPE,
    RBAC_RULES,
    REPORTED_ANNOTATION,
    TAINT_KEY,
    KubernetesAgent,
    KubernetesDrainError,
    taint_value,
)
from gpuforge.node.report import NodeReport
from gpuforge.node.xid import DMESG

pytestmark = pytest.mark.slow
# tests/node/test_node_slurm.py's XID79_REASON: the same failure gives the same reason on both paths.
XID79_REASON = "gpuforge: xid 79,154 on GPU 5"
P5_MANIFEST = REPO / "tests/fixtures/node/manifest/p5-h100.json"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with open_api_server(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture(scope="module")
def api_client(api_server: ApiServer) -> client.ApiClient:
    return config.new_client_from_config(str(api_server.kubeconfig))


@pytest.fixture(scope="module")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def policy(api_client: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api_client)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_server: str) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


def failing_xid79(tmp_path: Path) -> tuple[NodeReport, NodeContext]:
    root = tmp_path / "root"
    root.mkdir()
    ctx, _ = context(p5_healthy().set(DMESG, fixture("dmesg/xid79.txt")), "p5.48xlarge", root, attempts=1)
    report = run_checks(ctx, PERIODIC_CHECKS)
    assert [check.id for check in report.failures] == ["xid"]
    return report, ctx


def make_node(core: client.CoreV1Api, name: str) -> None:
    other = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    core.create_node(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": [other]}}
    )


def make_namespace(core: client.CoreV1Api, name: str) -> None:
    """A namespace and its default ServiceAccount (the service-account controller's part)."""
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})


def make_pod(core: client.CoreV1Api, namespace: str, name: str, node: str, **metadata: Any) -> None:
    """A pod bound to `node`, then Running and Ready as its kubelet would report it."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "train"}, **metadata},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.invalid/train@sha256:" + "0" * 64}],
        },
    }
    core.create_namespaced_pod(namespace, body)
    ready = [{"type": "Ready", "status": "True"}]
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running", "conditions": ready}})


def kubelet_removes_terminating_pods(core: client.CoreV1Api, node: str) -> None:
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if pod.metadata.deletion_timestamp is not None:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)


def allow_disruptions(policy: client.PolicyV1Api, namespace: str, name: str, allowed: int) -> None:
    """The disruption controller's part: the budget's status, current for its generation."""
    budget = policy.read_namespaced_pod_disruption_budget(name, namespace)
    status = {
        "observedGeneration": budget.metadata.generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": 1 + allowed,
        "desiredHealthy": 1,
        "expectedPods": 1 + allowed,
    }
    policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": status})


class Clock:
    """The agent's clock and sleep: each sleep advances time and runs the test's stand-ins."""

    def __init__(self, on_sleep: Callable[[int], None]) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        self.on_sleep(self.sleeps)


def test_a_failing_check_cordons_taints_and_states_the_reason(
    core: client.CoreV1Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_node(core, "gpu-cordon")
    report, ctx = failing_xid79(tmp_path)
    KubernetesAgent(node="gpu-cordon", api=core, report_asg=None).act(report, ctx)
    node = core.read_node("gpu-cordon")
    assert node.spec.unschedulable is True
    taints = {(t.key, t.value, t.effect) for t in node.spec.taints}
    # Ours added, the others kept (node.kubernetes.io/not-ready: admission TaintNodesByCondition adds it).
    assert taints == {
        ("nvidia.com/gpu", "true", "NoSchedule"),
        ("node.kubernetes.io/not-ready", None, "NoSchedule"),
        (TAINT_KEY, "xid", "NoSchedule"),
    }
    (condition,) = [c for c in node.status.conditions if c.type == CONDITION_TYPE]
    assert (condition.status, condition.message) == ("False", XID79_REASON)
    assert "with --report-asg its Auto Scaling group would replace it" in capsys.readouterr().err
    # A second run changes nothing: one taint, one condition.
    KubernetesAgent(node="gpu-cordon", api=core, report_asg=None).act(report, ctx)
    node = core.read_node("gpu-cordon")
    assert [t.key for t in node.spec.taints].count(TAINT_KEY) == 1
    assert [c.type for c in node.status.conditions].count(CONDITION_TYPE) == 1


def test_taint_values_keep_to_label_value_syntax() -> None:
    assert taint_value("xid") == "xid"
    assert taint_value("gpu inventory: 7/8") == "gpu-inventory-7-8"
    assert taint_value("-" + "a" * 70) == "a" * 63


def test_a_pod_under_a_budget_is_evicted_only_when_allowed_then_the_group_replaces_the_node(
    core: client.CoreV1Api, policy: client.PolicyV1Api, aws: str, tmp_path: Path
) -> None:
    node = "gpu-pdb"
    make_node(core, node)
    make_namespace(core, "llm")
    make_pod(core, "llm", "train-0", node)
    daemon_owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "nvidia-device-plugin",
        "uid": "1" * 8,
        "controller": True,
    }
    make_pod(core, "llm", "device-plugin", node, ownerReferences=[daemon_owner])
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": "llm"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    policy.create_namespaced_pod_disruption_budget("llm", budget)
    allow_disruptions(policy, "llm", "train", 0)
    autoscaling, instance_id = group_with_one_instance("gpu-nodes-k8s")
    identity = Identity(instance_id=instance_id, instance_type="p5.48xlarge", region=REGION)
    reported: list[str] = []

    def report_asg() -> str:
        assert [p.metadata.name for p in core.list_namespaced_pod("llm").items] == ["device-plugin"]
        report_unhealthy(identity)
        reported.append(instance_id)
        return str(instance_id)

    def controllers(sleeps: int) -> None:
        pod = core.read_namespaced_pod("train-0", "llm") if sleeps < 3 else None
        if sleeps < 3:  # the budget allows no disruption yet: the pod runs on, not terminating
            assert pod is not None and pod.metadata.deletion_timestamp is None
        if sleeps == 2:
            allow_disruptions(policy, "llm", "train", 1)
        kubelet_removes_terminating_pods(core, node)

    report, ctx = failing_xid79(tmp_path)
    clock = Clock(controllers)
    agent = KubernetesAgent(
        node=node,
        api=core,
        report_asg=report_asg,
        budget_s=60,
        retry_s=5,
        clock=clock.clock,
        sleep=clock.sleep,
    )
    agent.act(report, ctx)
    assert reported == [instance_id]
    assert clock.sleeps == 3  # refused twice (429), evicted on the third try, gone after the next
    assert health(autoscaling, instance_id).upper() == "UNHEALTHY"
    assert core.read_node(node).metadata.annotations[REPORTED_ANNOTATION] == instance_id
    # The next run finds it reported: not again.
    KubernetesAgent(node=node, api=core, report_asg=report_asg, clock=clock.clock, sleep=clock.sleep).act(
        report, ctx
    )
    assert reported == [instance_id]


def test_a_budget_that_never_allows_leaves_the_report_to_a_later_run(
    core: client.CoreV1Api, policy: client.PolicyV1Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = "gpu-stuck"
    make_node(core, node)
    make_namespace(core, "vision")
    make_pod(core, "vision", "train-0", node)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": "vision"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    policy.create_namespaced_pod_disruption_budget("vision", budget)
    allow_disruptions(policy, "vision", "train", 0)
    reported: list[str] = []

    def report_asg() -> str:
        reported.append(node)
        return node

    clock = Clock(lambda _: None)
    report, ctx = failing_xid79(tmp_path)
    agent = KubernetesAgent(
        node=node,
        api=core,
        report_asg=report_asg,
        budget_s=20,
        retry_s=5,
        clock=clock.clock,
        sleep=clock.sleep,
    )
    agent.act(report, ctx)
    assert reported == []
    assert clock.sleeps == 4  # tries at 0, 5, 10, 15, 20 s: bounded by the drain budget
    assert core.read_namespaced_pod("train-0", "vision").metadata.deletion_timestamp is None
    assert "1 pod(s) not evicted yet (vision/train-0): not reported yet" in capsys.readouterr().err


def test_an_api_error_names_the_rules_the_agent_needs(core: client.CoreV1Api, tmp_path: Path) -> None:
    report, ctx = failing_xid79(tmp_path)
    with pytest.raises(KubernetesDrainError, match=r"HTTP 404 .*RBAC_RULES"):
        KubernetesAgent(node="no-such-node", api=core, report_asg=None).act(report, ctx)


def test_the_kubelets_own_identity_cannot_taint_its_node(
    api_server: ApiServer, core: client.CoreV1Api
) -> None:
    """Why the agent has a kubeconfig of its own: NodeRestriction (on in EKS) refuses a node's taint change."""
    make_node(core, "gpu-self")
    kubelet = api_server.user_kubeconfig("system:node:gpu-self", "system:nodes")
    as_kubelet = client.CoreV1Api(config.new_client_from_config(str(kubelet)))
    with pytest.raises(KubernetesDrainError, match="HTTP 403"):
        KubernetesAgent(node="gpu-self", api=as_kubelet, report_asg=None).cordon("xid", XID79_REASON)
    assert TAINT_KEY not in {t.key for t in core.read_node("gpu-self").spec.taints}


def test_node_check_kubernetes_drains_with_only_the_agents_rules(
    api_server: ApiServer,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gpuforge node check --kubernetes` end to end, as a user bound to RBAC_RULES and nothing else."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_cluster_role({"metadata": {"name": "gpuforge-node-agent"}, "rules": list(RBAC_RULES)})
    subject = {"kind": "User", "name": "gpuforge-node-agent", "apiGroup": "rbac.authorization.k8s.io"}
    role = {"kind": "ClusterRole", "name": "gpuforge-node-agent", "apiGroup": "rbac.authorization.k8s.io"}
    rbac.create_cluster_role_binding(
        {"metadata": {"name": "gpuforge-node-agent"}, "roleRef": role, "subjects": [subject]}
    )
    make_node(core, "gpu-cli")
    kubeconfig = api_server.user_kubeconfig("gpuforge-node-agent")
    code = run_node(
        p5_healthy().set(DMESG, fixture("dmesg/xid79.txt")),
        tmp_path,
        monkeypatch,
        "--kubernetes",
        "--node-name",
        "gpu-cli",
        "--kubeconfig",
        str(kubeconfig),
        "--expect",
        "p5.48xlarge",
        "--manifest",
        str(P5_MANIFEST),
    )
    assert code == 1
    node = core.read_node("gpu-cli")
    assert node.spec.unschedulable is True
    (condition,) = [c for c in node.status.conditions if c.type == CONDITION_TYPE]
    assert condition.message == XID79_REASON
    assert "cordoned gpu-cli: gpuforge: xid 79,154 on GPU 5" in capsys.readouterr().err


def test_node_check_kubernetes_without_a_node_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError, match="--kubernetes needs --node-name"):
        run_node(p5_healthy(), tmp_path, monkeypatch, "--kubernetes", "--expect", "p5.48xlarge")


def test_an_unreadable_agent_kubeconfig_is_an_error_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent.kubeconfig"
    with pytest.raises(KubernetesDrainError, match=r"cannot read the node agent's kubeconfig .*RBAC_RULES"):
        run_node(
            p5_healthy().set(DMESG, fixture("dmesg/xid79.txt")),
            tmp_path,
            monkeypatch,
            "--kubernetes",
            "--node-name",
            "gpu-x",
            "--kubeconfig",
            str(missing),
            "--expect",
            "p5.48xlarge",
            "--manifest",
            str(P5_MANIFEST),
        )


def test_a_passing_check_leaves_a_gpuforge_cordon_in_place_and_says_so(
    core: client.CoreV1Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_node(core, "gpu-healed")
    report, ctx = failing_xid79(tmp_path)
    KubernetesAgent(node="gpu-healed", api=core, report_asg=None).act(report, ctx)
    root = tmp_path / "healthy-root"
    root.mkdir()
    healthy_ctx, _ = context(p5_healthy(), "p5.48xlarge", root, attempts=1)
    healthy = run_checks(healthy_ctx, PERIODIC_CHECKS)
    assert healthy.healthy
    KubernetesAgent(node="gpu-healed", api=core, report_asg=None).act(healthy, healthy_ctx)
    node = core.read_node("gpu-healed")
    assert node.spec.unschedulable is True and TAINT_KEY in {t.key for t in node.spec.taints}
    assert "stays cordoned and tainted gpuforge.dev/unhealthy" in capsys.readouterr().err
    # A node gpuforge never tainted is left alone by a passing check: no cordon.
    make_node(core, "gpu-fine")
    KubernetesAgent(node="gpu-fine", api=core, report_asg=None).act(healthy, healthy_ctx)
    assert core.read_node("gpu-fine").spec.unschedulable is None
