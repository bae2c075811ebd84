"""kubernetes-grace-period (advisory): a team pod gets at least its QOS's grace period to save its state.

On a Kubernetes stack a QOS's `gracePeriod` (gpuforge:scheduler.qos) cannot be set by gpuforge for the pods
teams submit: when Kueue preempts a workload it evicts it, the Job is suspended and its pods deleted, and a
deleted pod gets SIGTERM and then SIGKILL after its own `terminationGracePeriodSeconds`, 30 when unset
(https://kueue.sigs.k8s.io/docs/concepts/preemption/; https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination;
the default in k8s.io/api core/v1 `DefaultTerminationGracePeriodSeconds = 30`). So this rule reads each pod of a
workload that names a QOS, by Kueue's `kueue.x-k8s.io/priority-class` label (gpuforge renders each QOS as a
WorkloadPriorityClass of its name) or else the pod's `priorityClassName` (its PriorityClass), and says when the
pod's terminationGracePeriodSeconds is below that QOS's grace. Advisory: the pod runs, it only cannot save in
time.

The grace periods are the stack's: this policy's config `gracePeriods` (QOS name -> seconds), which `gpuforge
policy kubernetes --stack-dir DIR --stack NAME` fills from the stack file (`grace_periods`), and which
`pulumi preview --policy-pack policies/ --policy-pack-config FILE` takes as written. Without it the rule has
nothing to compare and says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpuforge.policies.engine_adapter import MISSING, UNKNOWN, unknown_during_preview
from gpuforge.policies.kubernetes_objects import WORKLOADS, ObjectType, join, members, type_of_token, walk
from gpuforge.policies.props import at

if TYPE_CHECKING:
    from gpuforge.components.specs import QosSpec

NAME: Final = "kubernetes-grace-period"
GRACE_PERIODS_KEY: Final = "gracePeriods"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
# A pod's terminationGracePeriodSeconds when unset: k8s.io/api core/v1 types.go,
# DefaultTerminationGracePeriodSeconds = 30.
DEFAULT_TERMINATION_GRACE_S: Final = 30


def grace_periods(qos: Iterable[QosSpec]) -> dict[str, int]:
    """The stack's QOS grace periods as this policy's config value: QOS name -> seconds, for QOS that have one."""
    return {level.name: level.grace_period for level in qos if level.grace_period is not None}


def _text(value: Any, path: str) -> str | None:
    if value is UNKNOWN:
        unknown_during_preview(path.split("."))
    return value if isinstance(value, str) and value else None


def _label(obj: Any, path: str) -> str | None:
    return _text(at(obj, "metadata", "labels", PRIORITY_CLASS_LABEL), join(path, "metadata.labels"))


def short_grace(object_type: ObjectType, obj: Any, periods: Mapping[str, int]) -> list[str]:
    """Each pod of a workload naming a QOS with a grace period whose terminationGracePeriodSeconds is below it."""
    if not periods:
        return []
    found = []
    every = list(members(object_type, obj))
    by_path = {member.path: member for member in every}
    for member in every:
        workload = WORKLOADS.get(member.type) if member.type is not None else None
        if workload is None:
            continue
        # Kueue reads the label of the object it admits: the member, or the AppWrapper that carries it.
        owner = by_path.get(member.queue_path, member) if member.queue_path != member.path else member
        labelled = _label(member.obj, member.path) or _label(owner.obj, owner.path)
        for steps in workload.pods:
            pods, _ = walk(member.obj, steps, member.path)
            for path, spec in pods:
                if not isinstance(spec, Mapping):
                    continue
                qos = labelled or _text(at(spec, "priorityClassName"), join(path, "priorityClassName"))
                if qos is None or qos not in periods:
                    continue
                raw = at(spec, "terminationGracePeriodSeconds")
                if raw is UNKNOWN:
                    unknown_during_preview(join(path, "terminationGracePeriodSeconds").split("."))
                unset = raw is MISSING or raw is None
                if not unset and (isinstance(raw, bool) or not isinstance(raw, int | float)):
                    continue  # not a number: the API server refuses the object itself
                seconds = DEFAULT_TERMINATION_GRACE_S if unset else raw
                grace = periods[qos]
                if seconds >= grace:
                    continue
                shown = f"unset (Kubernetes' default, {seconds} s)" if unset else f"{seconds:g} s"
                found.append(
                    f"{join(path, 'terminationGracePeriodSeconds')} is {shown}, below QOS {qos}'s gracePeriod of "
                    f"{grace} s (gpuforge:scheduler.qos): when Kueue preempts the workload its pods are deleted, "
                    "and a deleted pod gets SIGTERM, then SIGKILL after its terminationGracePeriodSeconds, so the "
                    f"job cannot save its state in the grace the stack gives {qos}. Fix: set "
                    f"{join(path, 'terminationGracePeriodSeconds')}: {grace} (or more), and write the checkpoint "
                    "on SIGTERM."
                )
    return found


def _validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    object_type = type_of_token(args.resource_type)
    if object_type is None:
        return
    periods = {
        str(name): int(seconds) for name, seconds in dict(args.get_config()[GRACE_PERIODS_KEY]).items()
    }
    for message in short_grace(object_type, args.props, periods):
        report(message, None)


KUBERNETES_GRACE_PERIOD: Final = ResourceValidationPolicy(
    name=NAME,
    description=(
        "A pod of a workload that names a QOS (Kueue's priority-class label or its priorityClassName) has a "
        "terminationGracePeriodSeconds of at least that QOS's gracePeriod, so a preempted job can save its state."
    ),
    validate=_validate,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=PolicyConfigSchema(
        properties={
            GRACE_PERIODS_KEY: {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 1},
                "description": "The stack's QOS grace periods in seconds (gpuforge:scheduler.qos[].gracePeriod).",
                "default": {},
            }
        }
    ),
)
