"""What `gpuforge plan` prints: the JSON document and the text view of a Plan.

The JSON shape is a contract (scripts and CI read it):

    {"stack": str,
     "matrix": {"path": str, "digest": str},
     "ami": str,                                                    # the AMI id
     "image": {"region": str, "catalog": str},                      # where it was resolved
     "resources": [{"urn", "type", "name", "parent", "inputs"}],   # sorted by URN
     "summary": {...},                                              # GpuCluster.summary ("advice": [str])
     "policies": [{"policy", "enforcement", "urn", "message"}],
     "scheduler": {"type", "slurm_version", "controller_instance_type",
                   "controller_host", "controller_address",
                   "partitions": [{"name", "max_time", "default"}],
                   "files": {name: text}},                          # the rendered Slurm files
     "checkpoint": null | CheckpointAdvice.to_json(),               # gpuforge.checkpoint
     "preemption": [GraceAdvice.to_json()],                         # each preempted QOS (gpuforge.checkpoint.grace)
     "kubernetes": null | {"addons": {name: {"version", "rendered", "image", "why_not"}},
                           "eks_addons": {name: {"version", "source"}},
                           "topology": {"name", "levels"}, "flavors": [{"name", "node_labels", "tolerates"}],
                           "queues": [{"team", "cluster_queue", "local_queue", "gpu_quota"}],
                           "priority_classes": [{"name", "value"}],
                           "files": {path: text}}}                   # gpuforge.plan.kubernetes

`inputs` are the registration's inputs as the engine receives them (camelCased
keys, numbers as floats); `parent` is the parent's URN (the root Stack's for
top-level resources). `scheduler` is the summary's `scheduler` with the files the
controller serves (the program's `slurm_config` output); without Slurm its type is
`none`, its other values null and its partitions and files empty. `kubernetes` (null unless the
scheduler is Kubernetes) summarises the objects `gpuforge scheduler render` writes, with their files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuforge.checkpoint import CheckpointAdvice, stack_advice
from gpuforge.checkpoint.grace import GraceAdvice, grace_advice
from gpuforge.display import printable
from gpuforge.images.catalog import DEFAULT_CATALOG
from gpuforge.plan.kubernetes import kubernetes_document, kubernetes_lines
from gpuforge.plan.stack_plan import Plan
from gpuforge.policies.runner import Verdict
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource, TreeNode
from gpuforge.stack_config import StackConfig, display_path


def catalog_path(plan: Plan) -> Path:
    """The catalog the program resolved its AMI from."""
    return plan.config.catalog_path or DEFAULT_CATALOG


def plan_document(plan: Plan) -> dict[str, Any]:
    """The `--json` document; see the module docstring for its shape."""
    ami = plan.summary["ami"]
    resources = sorted(plan.run.resources, key=lambda resource: resource.urn or "")
    return {
        "stack": plan.config.stack,
        "matrix": {"path": str(plan.config.matrix_path), "digest": ami["matrix_digest"]},
        "ami": ami["id"],
        "image": {"region": ami["region"], "catalog": str(catalog_path(plan))},
        "resources": [resource_document(resource) for resource in resources],
        "summary": plain(plan.summary),
        "policies": [asdict(verdict) for verdict in plan.verdicts],
        "scheduler": {**plain(plan.summary["scheduler"]), "files": dict(plan.slurm_config)},
        "checkpoint": None if (advice := plan_checkpoint(plan.config)) is None else advice.to_json(),
        "preemption": [entry.to_json() for entry in plan_grace(plan.config)],
        "kubernetes": kubernetes_document(plan.config),
    }


def plan_checkpoint(config: StackConfig) -> CheckpointAdvice | None:
    """The stack's checkpoint advice at plan time: the published MTBF (no failure history yet), a job on
    every node; None without `gpuforge:checkpoint`."""
    return stack_advice(config)


def plan_grace(config: StackConfig) -> list[GraceAdvice]:
    """Each preempted QOS's grace period beside the stack's checkpoint advice (README, "Preemption with a grace
    period")."""
    return grace_advice(config.scheduler.qos, plan_checkpoint(config))


def grace_lines(config: StackConfig) -> list[str]:
    """The summary's preemption lines: per preempted QOS its grace and what a preempted job loses, and the advice
    where the checkpoint does not fit the grace."""
    entries = plan_grace(config)
    lines = [
        f"  {'preemption' if index == 0 else '':<10} {entry.line()}" for index, entry in enumerate(entries)
    ]
    return lines + [
        f"  {'advice':<10} {warning}" for entry in entries if (warning := entry.warning()) is not None
    ]


def checkpoint_lines(config: StackConfig) -> list[str]:
    """The summary's checkpoint line (README, "Checkpoint interval")."""
    advice = plan_checkpoint(config)
    if advice is None:
        return []
    first, *rest = advice.lines()
    return [f"  checkpoint {first}", *(f"             {line}" for line in rest)]


def team_lines(config: StackConfig) -> list[str]:
    """The summary's teams and QOS (README, "Teams, quotas and preemption"): each team's GPU quota, QOS (the
    first its default; none: Slurm's `normal`) and users, and each QOS's priority and whom it preempts.
    Nothing when the stack names neither."""
    scheduler = config.scheduler
    lines = []
    if scheduler.teams:
        teams = "; ".join(
            f"{team.name} {team.gpu_quota} GPUs, QOS "
            + (
                ", ".join([f"{team.qos[0]} (default)", *team.qos[1:]])
                if team.qos
                else "normal (Slurm's default)"
            )
            + f", users {', '.join(user.name for user in team.users)}"
            for team in scheduler.teams
        )
        lines.append(f"  teams      {teams}")
    if scheduler.qos:
        levels = "; ".join(
            f"{qos.name} priority {qos.priority}"
            + (f", preempts {', '.join(qos.preempts)} (requeued, not killed)" if qos.preempts else "")
            + (f", {qos.grace_period} s grace when preempted" if qos.grace_period else "")
            for qos in scheduler.qos
        )
        lines.append(f"  QOS        {levels}")
    return lines


def advice_lines(summary: Mapping[str, Any]) -> list[str]:
    """The summary's `advice` (README, "Teams, quotas and preemption"): what the stack allows but may not mean,
    said once per item; nothing when there is none."""
    advice = [printable(item) for item in summary.get("advice") or ()]
    return [f"  {'advice' if index == 0 else '':<10} {item}" for index, item in enumerate(advice)]


def resource_document(resource: RecordedResource) -> dict[str, Any]:
    """One entry of `resources` (also `gpuforge policy check --json`'s)."""
    return {
        "urn": resource.urn,
        "type": resource.type,
        "name": resource.name,
        "parent": resource.parent_urn,
        "inputs": plain(resource.inputs),
    }


def plain(value: Any) -> Any:
    """Mappings and sequences as dicts and lists, so json.dumps takes them."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(item) for item in value]
    return value


def render_text(plan: Plan, *, slurm_conf: bool = False) -> str:
    """The plan for a person: header, resource tree, summary, policy verdicts, result.

    With `slurm_conf`, the rendered slurm.conf follows, as written to the controller.
    """
    summary = [
        *summary_lines(plan.summary),
        *team_lines(plan.config),
        *kubernetes_lines(kubernetes_document(plan.config)),
        *checkpoint_lines(plan.config),
        *grace_lines(plan.config),
        *advice_lines(plan.summary),
    ]
    lines = [*_header(plan), "", *_tree(plan), "", *summary, "", *_policies(plan), ""]
    lines.append(_result(plan))
    if slurm_conf:
        lines += ["", *_slurm_conf(plan)]
    return "\n".join(lines)


def _slurm_conf(plan: Plan) -> list[str]:
    text = plan.slurm_config.get("slurm.conf")
    if text is None:
        return [
            "slurm.conf: none; the stack has no Slurm scheduler. Fix: set gpuforge:scheduler "
            "(type: slurm, controllerInstanceType) in the stack file to give it one."
        ]
    scheduler = plan.summary["scheduler"]
    return [
        f"slurm.conf (served by {scheduler['controller_host']} at {scheduler['controller_address']}):",
        text.rstrip("\n"),
    ]


def _header(plan: Plan) -> list[str]:
    config = plan.config
    ami = plan.summary["ami"]
    return [
        f"Stack     {config.stack} of project {config.project} ({display_path(config.stack_dir / f'Pulumi.{config.stack}.yaml')})",
        f"Matrix    {display_path(config.matrix_path)}: {ami['matrix_name']} {ami['matrix_version']}, digest {ami['matrix_digest']}",
        f"AMI       {ami['id']} in {ami['region']}, from catalog {display_path(catalog_path(plan))}",
    ]


def _natural(text: str) -> list[Any]:
    """Sort key that puts node-2 before node-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _sorted(nodes: Sequence[TreeNode]) -> list[TreeNode]:
    return sorted(nodes, key=lambda node: (_natural(node.resource.name), node.resource.type))


def _tree(plan: Plan) -> list[str]:
    return resource_tree(plan.run.mocks, project=plan.config.project, stack=plan.config.stack)


def resource_tree(mocks: GpuforgeMocks, *, project: str, stack: str) -> list[str]:
    """Every resource under the root Stack, children sorted by name."""
    lines = [
        f"Resources: {len(mocks.resources)} registered (type  name)",
        f"  pulumi:pulumi:Stack  {project}-{stack}",
    ]

    def visit(nodes: Sequence[TreeNode], prefix: str) -> Iterator[str]:
        ordered = _sorted(nodes)
        for index, node in enumerate(ordered):
            last = index == len(ordered) - 1
            yield f"{prefix}{'└─ ' if last else '├─ '}{node.resource.type}  {node.resource.name}"
            yield from visit(node.children, prefix + ("   " if last else "│  "))

    lines.extend(visit(mocks.tree(), "  "))
    return lines


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The cluster summary: the figures a person checks first."""
    capacity = summary["capacity"]
    placement = summary["placement"]
    ami = summary["ami"]
    mode = "an Auto Scaling group" if summary["node_mode"] == "asg" else "fixed instances"
    if summary.get("kubernetes"):
        mode = "an EKS managed node group (custom AMI in its launch template)"
    return [
        "Summary",
        f"  nodes      {summary['nodes']} x {summary['instance_type']} as {mode}{_schedule(capacity)}",
        f"  GPUs       {summary['gpus_total']} x {summary['gpu_manufacturer']} {summary['gpu_model']}"
        f" ({summary['gpus_per_node']} per node)",
        f"  EFA        {_efa(summary)}, network {summary['network_performance']}",
        f"  scratch    {summary['scratch_per_node_gb']} GB local NVMe per node"
        f" ({summary['scratch_disks_per_node']} instance-store disk(s))",
        f"  Lustre     {_lustre(summary['lustre'])}",
        f"  placement  {_placement(placement, capacity)}",
        f"  capacity   {_capacity(capacity)}",
        f"  scheduler  {_scheduler(summary['scheduler'], summary.get('kubernetes'))}",
        f"  monitoring {_monitoring(summary['monitoring'])}",
        f"  accounting {_accounting(summary['accounting'])}",
        f"  AMI        {ami['id']} ({ami['region']}), matrix {ami['matrix_name']} {ami['matrix_version']}",
    ]


def _scheduler(scheduler: Mapping[str, Any], kubernetes: Mapping[str, Any] | None = None) -> str:
    if kubernetes is not None:
        line = (
            f"Kubernetes {kubernetes['version']} on EKS (endpoint {kubernetes['endpoint_access']}, authentication "
            f"mode {kubernetes['authentication_mode']}: access entries), system nodes {kubernetes['system_nodes']} x {kubernetes['system_node_type']}"
        )
        scale_down = kubernetes["capacity_block_scale_down"]
        return f"{line}; {scale_down}" if scale_down else line
    if scheduler["type"] != "slurm":
        return "none"
    partitions = ", ".join(
        f"{partition['name']} ({'default, ' if partition['default'] else ''}"
        f"max time {partition['max_time'] or 'unlimited'})"
        for partition in scheduler["partitions"]
    )
    return (
        f"Slurm {scheduler['slurm_version']}, controller {scheduler['controller_instance_type']} "
        f"{scheduler['controller_host']} at {scheduler['controller_address']}; partitions {partitions}"
    )


def _accounting(accounting: Mapping[str, Any]) -> str:
    """Where slurmdbd keeps Slurm's accounting (summary's `accounting`, components.cluster)."""
    if accounting["database"] is None:
        return "none (no slurmdbd: no Slurm, or the rendered Slurm files hold no slurmdbd.conf)"
    if accounting["database"] == "local":
        return (
            "slurmdbd with MariaDB on the controller's encrypted state volume "
            f"({accounting['state_volume_gib']} GiB, shared with slurmctld's state)"
        )
    endpoint = accounting["endpoint"] or "known after pulumi up"
    return (
        f"slurmdbd with Aurora MySQL Serverless v2 {accounting['engine_version']} at {endpoint} "
        "(private subnets, TLS required, password managed by RDS in Secrets Manager)"
    )


def _monitoring(monitoring: Mapping[str, Any]) -> str:
    """What the controller runs of the metrics layer (summary's `monitoring`, components.cluster)."""
    if not monitoring["enabled"]:
        return "none"
    parts = [
        f"Prometheus and Alertmanager on the controller ({len(monitoring['files'])} files in /etc/gpuforge/monitoring)",
        "drain receiver on" if monitoring["drain_receiver"] else "drain receiver off",
    ]
    if monitoring["remote_write_workspace"]:
        parts.append(f"remote write to {monitoring['remote_write_workspace']}")
    if monitoring["sns_topic"]:
        parts.append(f"alerts to {monitoring['sns_topic']}")
    return "; ".join(parts)


def _schedule(capacity: Mapping[str, Any]) -> str:
    steps = [f"{step['nodes']} at {step['at']}" for step in capacity["schedule"]]
    if not steps:
        return ""
    return f"; {capacity['initial_nodes']} now, then " + ", ".join(steps)


def _efa(summary: Mapping[str, Any]) -> str:
    if not summary["efa_interfaces_max"]:
        return f"none ({summary['instance_type']} has no EFA)"
    return f"{summary['efa_interfaces_per_node']} of {summary['efa_interfaces_max']} interfaces per node"


def _lustre(lustre: Mapping[str, Any] | None) -> str:
    if lustre is None:
        return "none"
    parts = [f"{lustre['deployment_type']}, {lustre['storage_capacity_gib']} GiB"]
    if lustre["throughput_per_tib"] is not None:
        parts.append(f"{lustre['throughput_per_tib']} MB/s/TiB")
    if lustre["throughput_mbps"] is not None:
        parts.append(f"{lustre['throughput_mbps']} MB/s baseline")
    parts.append(f"Lustre {lustre['lustre_version']}")
    links = {"dra": "S3 linked by a data repository association", "import_path": "S3 linked by import path"}
    parts.append(links.get(lustre["s3_link"], "no S3 link") if lustre["s3_link"] else "no S3 link")
    if lustre["efa_enabled"]:
        parts.append("EFA-enabled")
    return ", ".join(parts)


def _placement(placement: Mapping[str, Any], capacity: Mapping[str, Any]) -> str:
    if placement["source"] == "created":
        return f"new {placement['strategy']} placement group {placement['group']}"
    if placement["source"] == "reservation":
        return f"the reservation's placement group {placement['group']}"
    if capacity["type"] == "capacity-block":
        return "none: AWS places a Capacity Block's instances close together"
    return "none: the reservation names no placement group"


def _capacity(capacity: Mapping[str, Any]) -> str:
    if capacity["type"] == "on-demand":
        return "On-Demand"
    if capacity["type"] == "reservation":
        return f"Capacity Reservation {capacity['reservation_id']}"
    block = f"Capacity Block {capacity['reservation_id']}, {capacity['start']} to {capacity['end']}"
    fee = capacity.get("upfront_fee_usd")
    if fee is None:
        return block
    return f"{block}; upfront fee ${fee:,.2f} (gpuforge:capacity.upfrontFeeUsd)"


def _policies(plan: Plan) -> list[str]:
    return verdict_lines(plan.verdicts, plan.run.resources)


def verdict_lines(verdicts: Sequence[Verdict], resources: Sequence[RecordedResource]) -> list[str]:
    """The Policies section: one line per verdict, naming the resource by type and name."""
    lines = ["Policies"]
    if not verdicts:
        lines.append(f"  no violations ({len(resources)} resources checked)")
    by_urn = {resource.urn: resource for resource in resources}
    for verdict in verdicts:
        resource = by_urn.get(verdict.urn)
        where = f"{resource.type} {resource.name}" if resource else (verdict.urn or "stack")
        lines.append(f"  {verdict.enforcement.upper():9} {verdict.policy} on {where}: {verdict.message}")
    return lines


def _result(plan: Plan) -> str:
    return result_line(plan.verdicts)


def result_line(verdicts: Sequence[Verdict]) -> str:
    """FAIL with the count of mandatory violations, else OK with the count of the others."""
    failures = sum(verdict.enforcement == "mandatory" for verdict in verdicts)
    if failures:
        return f"Result: FAIL, {failures} mandatory policy violation(s)"
    advisory = len(verdicts)
    return "Result: OK" + (f", {advisory} advisory verdict(s)" if advisory else "")
