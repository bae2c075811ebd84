"""`gpuforge validate --drain` on a Kubernetes stack: the node agent's own drain, run from the operator's seat.

Each node the acceptance found bad (`run.failed_nodes`: the same check and reason text `validate --drain`
gives Slurm, "gpuforge: validate: ...") goes through `gpuforge.node.kubernetes.KubernetesAgent.drain`, the
path of the node agent's failing check: cordoned, tainted `gpuforge.dev/unhealthy=<check>:NoSchedule`, the
condition `GpuforgeHealthy=False` with the reason, its pods evicted through the Eviction API within their
disruption budgets and the agent's drain budget, then reported Unhealthy to its Auto Scaling group.

The instance reported is the node's `spec.providerID`, `aws:///<zone>/<instance id>` on EKS (the AWS cloud
provider's form, e.g. https://repost.aws/questions/QU5a3sSXYYTA6ejvXTooG6Ag "providerID:
aws:///<AZ>/<EC2_INSTANCE_ID>"), in the stack's region, with the caller's AWS credentials (they need
autoscaling:SetInstanceHealth). A node whose pods are not all evicted within the budget stays cordoned and
tainted; the node agent on it acts on its own taint and finishes the eviction and the report on its next run.
A node cordoned already (by gpuforge, an administrator or anyone) is left as it is, with its reason, as
Slurm's drain leaves a drained node (`gpuforge.node.slurm.drain_unless_drained`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpuforge.node.asg import AsgReportError, report_unhealthy
from gpuforge.node.imds import Identity
from gpuforge.node.kubernetes import DRAIN_BUDGET_S, KubernetesAgent, KubernetesDrainError
from gpuforge.validate.report import Report
from gpuforge.validate.run import failed_nodes

_PROVIDER_ID = re.compile(r"aws:///[a-z0-9-]+/(i-[0-9a-f]{8,17})")


def instance_id(node: Any) -> str:
    """The EC2 instance of a Node, from its `spec.providerID`; an error naming the node when it has none."""
    provider_id = (node.spec.provider_id if node.spec else None) or ""
    found = _PROVIDER_ID.fullmatch(provider_id)
    if found is None:
        raise KubernetesDrainError(
            f"node {node.metadata.name}: spec.providerID is {provider_id!r}, not aws:///<zone>/<instance id>, so "
            "its Auto Scaling group cannot be told; it was not drained. Fix: drain it by hand (`kubectl drain`), "
            "and check that the node joined through the AWS cloud provider (EKS sets providerID)."
        )
    return found.group(1)


def _reporter(instance: str, instance_type: str, region: str) -> Callable[[], str]:
    def report() -> str:
        try:
            report_unhealthy(Identity(instance_id=instance, instance_type=instance_type, region=region))
        except AsgReportError as error:
            raise AsgReportError(
                f"{error.message} (validate --drain reports with your AWS credentials: they need "
                "autoscaling:SetInstanceHealth; the node stays cordoned, and its node agent reports it on its "
                "next run)"
            ) from None
        return instance

    return report


def drain_failed_nodes(
    core: Any,
    report: Report,
    *,
    region: str,
    instance_type: str,
    progress: Callable[[str], None],
    budget_s: float = DRAIN_BUDGET_S,
    make_agent: Callable[..., KubernetesAgent] = KubernetesAgent,
) -> list[str]:
    """Drain every node of `failed_nodes(report)` as the node agent does; returns the nodes this call cordoned.

    `core` is a kubernetes.client.CoreV1Api; `make_agent` lets a test give the agent its clock and sleep."""
    drained = []
    for failed in failed_nodes(report):
        agent = make_agent(node=failed.node, api=core, report_asg=None, budget_s=budget_s)
        node = agent.read()
        if node.spec is not None and node.spec.unschedulable:
            progress(f"validate: {failed.node} is cordoned already; left as it is")
            continue
        agent.report_asg = _reporter(instance_id(node), instance_type, region)
        agent.drain(failed.check, failed.reason)
        drained.append(failed.node)
    return drained
