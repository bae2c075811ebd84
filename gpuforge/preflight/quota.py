"""Quota: the On-Demand vCPU quota of the instance family covers what runs plus the stack's nodes.

EC2 limits On-Demand instances per family by vCPUs. The two quotas a GPU stack
meets, as AWS's Service Quotas API names them (ServiceCode `ec2`; console page
https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/<code>):
- L-417A185B "Running On-Demand P instances" (usage metric class P/OnDemand);
- L-DB2E81BA "Running On-Demand G and VT instances".
No AWS documentation page in reach prints these codes; they were checked against
recorded ListServiceQuotas responses (code, QuotaName and usage class together),
and at run time the QuotaName AWS returns is compared with the name above.

How usage is counted:
- running and pending On-Demand instances of the family count with their type's
  default vCPUs (Spot instances have their own quotas and are left out);
- active On-Demand Capacity Reservations count with their whole capacity, used or
  not: AWS refuses a reservation larger than the On-Demand limit
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateCapacityReservation.html),
  so instances running inside one are not counted a second time, and nodes the
  stack launches into an active reservation add nothing;
- Capacity Blocks have limits of their own (at most 64 instances per block and
  256 across blocks, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html),
  and AWS does not say whether block instances also count against the On-Demand
  quota. For a block the shortfall is therefore a warning, not a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, cast

from gpuforge.hardware import InstanceType
from gpuforge.preflight.report import Check, fail, ok, warn
from gpuforge.stack_config import StackConfig

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType
    from mypy_boto3_service_quotas import ServiceQuotasClient

QUOTA = "quota"
SERVICE_CODE = "ec2"
CAPACITY_BLOCK_LIMITS = (
    "Capacity Blocks have their own limits (64 instances per block, 256 across blocks; "
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html)"
)
_DESCRIBE_TYPES_MAX = 100  # DescribeInstanceTypes takes up to 100 names per call


@dataclass(frozen=True)
class OnDemandQuota:
    """One On-Demand vCPU quota and the instance type names it covers."""

    code: str
    name: str
    patterns: tuple[str, ...]

    def covers(self, instance_type: str) -> bool:
        return any(fnmatchcase(instance_type, pattern) for pattern in self.patterns)


P_INSTANCES = OnDemandQuota("L-417A185B", "Running On-Demand P instances", ("p*",))
G_AND_VT_INSTANCES = OnDemandQuota("L-DB2E81BA", "Running On-Demand G and VT instances", ("g*", "vt*"))
QUOTAS: tuple[OnDemandQuota, ...] = (P_INSTANCES, G_AND_VT_INSTANCES)


def quota_for(instance_type: str) -> OnDemandQuota | None:
    return next((quota for quota in QUOTAS if quota.covers(instance_type)), None)


@dataclass(frozen=True)
class QuotaValue:
    value: float
    source: str  # "applied" or "AWS default"
    name: str  # the QuotaName AWS returned


@dataclass(frozen=True)
class FamilyUsage:
    """vCPUs of one quota's family in use now."""

    on_demand: int  # running and pending On-Demand instances outside On-Demand Capacity Reservations
    reserved: int  # active On-Demand Capacity Reservations, whole capacity
    in_blocks: int  # instances running in Capacity Blocks (not counted in this quota here)
    active_reservations: frozenset[str]  # ids of the active On-Demand Capacity Reservations

    @property
    def counted(self) -> int:
        return self.on_demand + self.reserved


def quota_value(quotas: ServiceQuotasClient, quota: OnDemandQuota) -> QuotaValue:
    """The applied quota value, or AWS's default where no applied value is returned."""
    try:
        applied = quotas.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=quota.code)["Quota"]
    except quotas.exceptions.NoSuchResourceException:
        applied = {}
    if "Value" in applied:
        return QuotaValue(applied["Value"], "applied", applied.get("QuotaName", quota.name))
    default = quotas.get_aws_default_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=quota.code)["Quota"]
    return QuotaValue(default.get("Value", 0.0), "AWS default", default.get("QuotaName", quota.name))


def _default_vcpus(ec2: EC2Client, types: Iterable[str]) -> dict[str, int]:
    names = sorted(set(types))
    vcpus: dict[str, int] = {}
    for start in range(0, len(names), _DESCRIBE_TYPES_MAX):
        chunk = cast("list[InstanceTypeType]", names[start : start + _DESCRIBE_TYPES_MAX])
        for described in ec2.describe_instance_types(InstanceTypes=chunk)["InstanceTypes"]:
            vcpus[described["InstanceType"]] = described["VCpuInfo"]["DefaultVCpus"]
    return vcpus


def active_reservations(capacity: EC2Client) -> list[Mapping[str, Any]]:
    """Every active Capacity Reservation in the region (ODCRs and Capacity Blocks)."""
    paginator = capacity.get_paginator("describe_capacity_reservations")
    return [
        reservation
        for page in paginator.paginate(Filters=[{"Name": "state", "Values": ["active"]}])
        for reservation in page["CapacityReservations"]
    ]


def family_usage(ec2: EC2Client, capacity: EC2Client, quota: OnDemandQuota) -> FamilyUsage:
    reservations = [r for r in active_reservations(capacity) if quota.covers(r["InstanceType"])]
    odcrs = {
        r["CapacityReservationId"]: r for r in reservations if r.get("ReservationType") != "capacity-block"
    }
    blocks = {
        r["CapacityReservationId"] for r in reservations if r.get("ReservationType") == "capacity-block"
    }
    paginator = ec2.get_paginator("describe_instances")
    instances = [
        instance
        for page in paginator.paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        for group in page["Reservations"]
        for instance in group["Instances"]
        if quota.covers(instance["InstanceType"]) and instance.get("InstanceLifecycle") != "spot"
    ]
    types = [str(i["InstanceType"]) for i in instances] + [str(r["InstanceType"]) for r in odcrs.values()]
    vcpus = _default_vcpus(ec2, types) if types else {}
    on_demand = in_blocks = 0
    for instance in instances:
        size = vcpus.get(instance["InstanceType"], 0)
        reservation = instance.get("CapacityReservationId")
        if reservation in odcrs:
            continue  # counted with its reservation below
        if instance.get("InstanceLifecycle") == "capacity-block" or reservation in blocks:
            in_blocks += size
        else:
            on_demand += size
    reserved = sum(vcpus.get(r["InstanceType"], 0) * r["TotalInstanceCount"] for r in odcrs.values())
    return FamilyUsage(on_demand, reserved, in_blocks, frozenset(odcrs))


def check_quota(
    ec2: EC2Client,
    capacity: EC2Client,
    quotas: ServiceQuotasClient,
    config: StackConfig,
    instance: InstanceType,
) -> Check:
    quota = quota_for(config.instance_type)
    if quota is None:
        codes = ", ".join(f"{q.code} ({q.name})" for q in QUOTAS)
        return warn(
            QUOTA,
            f"gpuforge knows no On-Demand vCPU quota for {config.instance_type}; it knows {codes}.",
            "check the family's quota in the Service Quotas console before `pulumi up`.",
        )
    limit = quota_value(quotas, quota)
    usage = family_usage(ec2, capacity, quota)
    node_vcpus = config.node_count * instance.vcpus
    kind = config.capacity.type
    into_reservation = kind == "reservation" and config.capacity.reservation_id in usage.active_reservations
    adds = 0 if into_reservation else node_vcpus
    need = usage.counted + adds
    name_note = "" if limit.name == quota.name else f" (AWS names it {limit.name!r})"
    summary = (
        f"{quota.name} ({quota.code}){name_note} in {config.region}: limit {limit.value:g} vCPUs "
        f"({limit.source}); in use {usage.on_demand} by running On-Demand instances + {usage.reserved} "
        f"by active On-Demand Capacity Reservations (counted even when unused)"
    )
    stack = f"{config.node_count} x {config.instance_type} = {node_vcpus} vCPUs"
    if into_reservation:
        summary += (
            f"; the stack's {stack} launch into reservation {config.capacity.reservation_id}, already counted"
        )
    else:
        summary += f"; the stack adds {stack}"
    summary += f"; total {need}"
    if usage.in_blocks:
        summary += f"; {usage.in_blocks} vCPUs run in Capacity Blocks (not counted here)"
    fix = (
        f"request at least {need} vCPUs: `aws service-quotas request-service-quota-increase "
        f"--service-code ec2 --quota-code {quota.code} --desired-value {need} --region {config.region}`"
    )
    if need <= limit.value:
        return ok(QUOTA, summary + ".")
    if kind == "capacity-block":
        return warn(
            QUOTA,
            summary + f" > {limit.value:g}. {CAPACITY_BLOCK_LIMITS}, and AWS does not document whether "
            "block instances also count against this quota.",
            f"if launches into the block fail with VcpuLimitExceeded, {fix}.",
        )
    return fail(QUOTA, summary + f" > {limit.value:g}.", fix + ", or lower gpuforge:nodeCount.")
