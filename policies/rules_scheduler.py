"""Scheduler rules: the Slurm controller runs on a CPU instance.

slurmctld is a daemon that schedules jobs; it runs none (SlurmController's instance
is no Slurm node). A GPU instance type there pays for GPUs that idle for the
cluster's whole life, and P-family capacity is the scarcest there is. The rule finds
the controller by the tag SlurmController gives it (`gpuforge:role = slurm-controller`)
and asks the hardware catalog, the same data the nodes are built from, whether its type
has GPUs. A type the catalog does not hold is not a GPU type gpuforge knows, so it passes.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge import hardware
from gpuforge.errors import UnknownInstanceType
from gpuforge.policies.node_settings import NodeSettings
from gpuforge.policies.props import text


def validate_controller_cpu(args: ResourceValidationArgs, report: ReportViolation) -> None:
    node = NodeSettings.of(args)
    if node is None or not node.is_slurm_controller:
        return
    type_name = text(node.get("instanceType"))
    if not isinstance(type_name, str):
        return  # unset or not known at preview: there is no type to judge
    try:
        instance = hardware.get(type_name)
    except UnknownInstanceType:
        return
    if instance.gpu_count == 0:
        return
    report(
        f"the Slurm controller runs on {instance.name}, a GPU type ({instance.gpu_count} x "
        f"{instance.gpu_manufacturer} {instance.gpu_model}): slurmctld runs no jobs, so these GPUs idle for "
        "the cluster's whole life. Fix: set gpuforge:scheduler.controllerInstanceType to a CPU type, "
        "e.g. m7i.2xlarge.",
        None,
    )


SLURM_CONTROLLER_CPU = ResourceValidationPolicy(
    name="slurm-controller-cpu",
    description=(
        "The Slurm controller runs on a CPU instance type. Instead of a GPU type from the hardware catalog, "
        "whose GPUs would idle under a daemon, set controllerInstanceType to a CPU type such as m7i.2xlarge."
    ),
    validate=validate_controller_cpu,
    enforcement_level=EnforcementLevel.ADVISORY,
)
