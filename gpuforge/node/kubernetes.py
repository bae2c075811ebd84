"""The node agent's drain-and-replace path on a Kubernetes node (issue 23, item 4).

The Slurm path (gpuforge.node.slurm) drains through scontrol; this one does the same
through the Kubernetes API, with the same reason text (slurm.drain_reason: "gpuforge:
xid 79 on GPU 5") and the same Unhealthy report to the Auto Scaling group
(gpuforge.node.asg.report_unhealthy, passed in as `report_asg` exactly as the Slurm
agent gets it). One run of a failing check:

1. **Cordon and mark**: one JSON patch (guarded by the node's resourceVersion) sets
   `spec.unschedulable` and adds the taint `gpuforge.dev/unhealthy=<check id>:NoSchedule`,
   then the node's status gets the condition `GpuforgeHealthy=False` whose message is the
   reason. Why both: a taint's value must be a label value (at most 63 characters of
   `[A-Za-z0-9._-]`, starting and ending alphanumeric), so "gpuforge: xid 79 on GPU 5" cannot
   be one; the taint keeps pods off by the check's id, the condition carries the human reason
   (`kubectl describe node` shows it), as node-problem-detector reports its problems.
2. **Evict**: every pod bound to the node, except DaemonSet and mirror pods and pods that
   have ended, through the Eviction API (POST pods/<name>/eviction), so PodDisruptionBudgets
   are honoured: 429 means the budget allows no disruption now, and the pod is tried again
   every `retry_s` until the drain deadline; a pod already gone (404) counts as evicted. An
   evicted pod terminates within its grace period, and is waited for like a refused one.
3. **Replace**: once no such pod is left, the instance is reported Unhealthy to its Auto
   Scaling group, once (the node's annotation `gpuforge.dev/reported-unhealthy` records it).
   Pods still waiting on a budget at the deadline leave the report to the next run.

A node that passes its checks again stays cordoned (the failure is not trusted to have
healed, as on Slurm): an administrator uncordons it and removes the taint.

Credentials: the kubelet's own identity cannot do step 1: the NodeRestriction admission
plugin forbids a node to modify its own taints (kubernetes v1.35.8,
plugin/pkg/admission/noderestriction/admission.go, "node %q is not allowed to modify
taints"). The agent therefore uses its own kubeconfig, whose user needs `RBAC_RULES`.
The `kubernetes` client is imported lazily, like boto3 in gpuforge.node.asg, so the checks
run on a node without it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuforge.errors import GpuforgeError
from gpuforge.node.context import NodeContext
from gpuforge.node.report import NodeReport
from gpuforge.node.slurm import drain_reason

TAINT_KEY = "gpuforge.dev/unhealthy"
TAINT_EFFECT = "NoSchedule"
CONDITION_TYPE = "GpuforgeHealthy"
CONDITION_REASON = "GpuforgeCheckFailed"
REPORTED_ANNOTATION = "gpuforge.dev/reported-unhealthy"
# Label-value syntax (taint values share it): k8s.io/apimachinery validation IsValidLabelValue.
LABEL_VALUE_MAX = 63
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
# What the agent's kubeconfig user may do, as RBAC rules (a ClusterRole): read and patch nodes
# and their status, list pods on this node, create evictions.
RBAC_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
)
# Where the node agent's own kubeconfig lives on a node (--kubeconfig).
DEFAULT_KUBECONFIG = Path("/etc/gpuforge/node-agent.kubeconfig")
DRAIN_BUDGET_S = 120.0
RETRY_S = 5.0
CONFLICT_ATTEMPTS = 5


class KubernetesDrainError(GpuforgeError):
    """The API server could not be asked or told: the node is not (fully) drained (exit 1)."""

    exit_code = 1


def taint_value(check_id: str) -> str:
    """`check_id` in label-value syntax: other characters become '-', cut to 63, ends alphanumeric."""
    value = _NOT_LABEL.sub("-", check_id).strip("._-")[:LABEL_VALUE_MAX].rstrip("._-")
    return value or "check"


def _say(message: str) -> None:
    print(f"gpuforge: kubernetes: {message}", file=sys.stderr)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _evictable(pod: Any) -> bool:
    """kubectl drain's choice: not a DaemonSet's pod (it would come back), not a mirror pod, still running."""
    owners = pod.metadata.owner_references or []
    if any(owner.kind == "DaemonSet" for owner in owners):
        return False
    if "kubernetes.io/config.mirror" in (pod.metadata.annotations or {}):
        return False
    return pod.status is None or pod.status.phase not in {"Succeeded", "Failed"}


@dataclass
class KubernetesAgent:
    """One periodic run on a Kubernetes node (see the module docstring)."""

    node: str
    api: Any  # kubernetes.client.CoreV1Api
    report_asg: Callable[[], str] | None  # reports Unhealthy, returns what it marked; None: no --report-asg
    budget_s: float = DRAIN_BUDGET_S
    retry_s: float = RETRY_S
    clock: Callable[[], float] = field(default=time.monotonic)
    sleep: Callable[[float], None] = field(default=time.sleep)

    def act(self, report: NodeReport, ctx: NodeContext) -> None:
        deadline = self.clock() + self.budget_s
        node = self._call("read node", self.api.read_node, self.node)
        ours = [taint for taint in node.spec.taints or [] if taint.key == TAINT_KEY]
        if report.healthy and not ours:
            return
        if not report.healthy:
            failures = sorted(report.failures, key=lambda check: check.id != "xid")
            self.drain(failures[0].id, drain_reason(report, ctx), deadline)
            return
        _say(
            f"checks pass, but {self.node} stays cordoned and tainted {TAINT_KEY}: an administrator "
            f"uncordons it (`kubectl uncordon {self.node}`) and removes the taint "
            f"(`kubectl taint node {self.node} {TAINT_KEY}-`)"
        )
        self._evict_then_replace(deadline)

    def drain(self, check_id: str, reason: str, deadline: float | None = None) -> bool:
        """Cordon, taint and mark the node with `reason`, evict its pods within their disruption budgets,
        then report it to its Auto Scaling group: the one drain of a failing check and of `gpuforge
        validate --drain` (gpuforge.validate.kubernetes_drain). True when it was reported (or had been)."""
        deadline = self.clock() + self.budget_s if deadline is None else deadline
        self.cordon(check_id, reason)
        _say(f"cordoned {self.node}: {reason} (pods are evicted within their disruption budgets)")
        return self._evict_then_replace(deadline)

    def _evict_then_replace(self, deadline: float) -> bool:
        left = self.evict_pods(deadline)
        if left:
            _say(f"{self.node}: {len(left)} pod(s) not evicted yet ({', '.join(left)}): not reported yet")
            return False
        return self._replace()

    def cordon(self, check_id: str, reason: str) -> None:
        """Unschedulable, tainted by the check's id, and the condition with the reason; idempotent."""
        taint = {"key": TAINT_KEY, "value": taint_value(check_id), "effect": TAINT_EFFECT}
        for _ in range(CONFLICT_ATTEMPTS):
            node = self._call("read node", self.api.read_node, self.node)
            taints = [
                self.api.api_client.sanitize_for_serialization(existing)
                for existing in node.spec.taints or []
                if existing.key != TAINT_KEY
            ]
            patch = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
                {"op": "add", "path": "/spec/unschedulable", "value": True},
                {"op": "add", "path": "/spec/taints", "value": [*taints, taint]},
            ]
            if self._patch(self.api.patch_node, patch):
                break
        else:
            raise KubernetesDrainError(
                f"node {self.node} kept changing; not cordoned after {CONFLICT_ATTEMPTS} tries"
            )
        now = _now()
        condition = {
            "type": CONDITION_TYPE,
            "status": "False",
            "reason": CONDITION_REASON,
            "message": reason,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for _ in range(CONFLICT_ATTEMPTS):
            node = self._call("read node", self.api.read_node, self.node)
            conditions = [
                self.api.api_client.sanitize_for_serialization(existing)
                for existing in (node.status.conditions if node.status else None) or []
                if existing.type != CONDITION_TYPE
            ]
            patch = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
                {"op": "add", "path": "/status/conditions", "value": [*conditions, condition]},
            ]
            if self._patch(self.api.patch_node_status, patch):
                return
        raise KubernetesDrainError(
            f"node {self.node} kept changing; condition {CONDITION_TYPE} not set after {CONFLICT_ATTEMPTS} tries"
        )

    def evict_pods(self, deadline: float) -> list[str]:
        """Evict every evictable pod on the node, retrying 429s until `deadline`; returns those left."""
        from kubernetes.client.exceptions import ApiException

        while True:
            pods = self._call(
                "list pods", self.api.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={self.node}"
            ).items
            left: list[str] = []
            for pod in filter(_evictable, pods):
                name, namespace = pod.metadata.name, pod.metadata.namespace
                if pod.metadata.deletion_timestamp is not None:
                    left.append(f"{namespace}/{name} (terminating)")  # evicted: its containers are stopping
                    continue
                body = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": name, "namespace": namespace},
                }
                try:
                    self.api.create_namespaced_pod_eviction(name, namespace, body)
                except ApiException as error:
                    if error.status == 404:
                        continue
                    if error.status != 429:
                        raise self._error(f"evict pod {namespace}/{name}", error) from error
                    left.append(f"{namespace}/{name}")
                    continue
                left.append(f"{namespace}/{name} (evicted)")  # it terminates within its grace period
            if not left or self.clock() + self.retry_s > deadline:
                return left
            self.sleep(self.retry_s)

    def read(self) -> Any:
        """The node as the API server has it; an error naming the rules the caller needs when it cannot."""
        return self._call("read node", self.api.read_node, self.node)

    def _replace(self) -> bool:
        node = self._call("read node", self.api.read_node, self.node)
        if REPORTED_ANNOTATION in (node.metadata.annotations or {}):
            _say(
                f"{self.node} was already reported Unhealthy; waiting for its Auto Scaling group to replace it"
            )
            return True
        if self.report_asg is None:
            _say(f"{self.node} is drained; with --report-asg its Auto Scaling group would replace it")
            return False
        marked = self.report_asg()
        patch = {"metadata": {"annotations": {REPORTED_ANNOTATION: marked}}}
        self._call("annotate node", self.api.patch_node, self.node, patch)
        _say(f"{self.node} is drained: marked {marked} Unhealthy in its Auto Scaling group")
        return True

    def _patch(self, method: Callable[..., Any], patch: list[dict[str, Any]]) -> bool:
        """Apply a JSON patch; False when its resourceVersion test failed (someone else wrote first)."""
        from kubernetes.client.exceptions import ApiException

        try:
            method(self.node, patch)
        except ApiException as error:
            if error.status in {409, 422} and "test operation" in str(error.body or ""):
                return False
            raise self._error(f"patch node {self.node}", error) from error
        return True

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args, **kwargs)
        except ApiException as error:
            raise self._error(what, error) from error

    def _error(self, what: str, error: Any) -> KubernetesDrainError:
        return KubernetesDrainError(
            f"could not {what} for node {self.node}: HTTP {error.status} {error.reason}. Fix: give the agent's "
            f"kubeconfig user the rules in gpuforge.node.kubernetes.RBAC_RULES, and check that {self.node} is "
            "the node's Kubernetes name."
        )


def core_api(kubeconfig: Path) -> Any:
    """A CoreV1Api for the agent's own kubeconfig; missing client or file is an error with the fix."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as error:
        raise KubernetesDrainError(
            "--kubernetes needs the `kubernetes` Python client, which is not installed on this node. "
            "Fix: install it in the image (pinned as the dev dependency kubernetes==35.0.0), or drop --kubernetes."
        ) from error
    try:
        return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    except (OSError, ConfigException) as error:
        raise KubernetesDrainError(
            f"cannot read the node agent's kubeconfig {kubeconfig}: {error}. Fix: write it with a user allowed "
            "gpuforge.node.kubernetes.RBAC_RULES (not the kubelet's: NodeRestriction forbids a node to taint "
            "itself), or pass --kubeconfig PATH."
        ) from error
