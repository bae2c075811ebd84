"""The cluster summary: what a person checks before and after `pulumi up`.

A plain JSON-able dict. Every hardware figure comes from the hardware catalog;
the network performance is AWS's own NetworkPerformance string for the type, never
a sum of per-card baselines (on p6-b200 eight 200 Gbps cards are reported beside
"3200 Gigabit"; the per-card figures do not add up to the type's bandwidth).
"""

from __future__ import annotations

from typing import Any

from gpuforge import hardware
from gpuforge.components import lustre_rules
from gpuforge.components.capacity import ScalePlan
from gpuforge.components.efa_layout import InterfaceSlot
from gpuforge.components.specs import GpuClusterSpec


def cluster_summary(
    spec: GpuClusterSpec,
    *,
    instance: hardware.InstanceType,
    interfaces: tuple[InterfaceSlot, ...],
    plan: ScalePlan,
    placement_group: str | None,
    placement_source: str,
    placement_strategy: str | None,
    lustre_s3_link: str | None,
) -> dict[str, Any]:
    return {
        "name": spec.name,
        "instance_type": instance.name,
        "node_mode": spec.node_mode,
        "nodes": spec.node_count,
        "gpu_manufacturer": instance.gpu_manufacturer,
        "gpu_model": instance.gpu_model,
        "gpus_per_node": instance.gpu_count,
        "gpus_total": instance.gpu_count * spec.node_count,
        "network_interfaces_per_node": len(interfaces),
        "efa_interfaces_per_node": sum(1 for slot in interfaces if slot.carries_efa),
        "efa_interfaces_max": instance.max_efa_interfaces,
        "network_performance": instance.network_performance,
        "scratch_disks_per_node": instance.instance_store_disks,
        "scratch_per_node_gb": instance.instance_store_gb,
        "lustre": _lustre(spec, lustre_s3_link),
        "placement": {"group": placement_group, "strategy": placement_strategy, "source": placement_source},
        "capacity": {
            "type": spec.capacity.type,
            "reservation_id": spec.capacity.reservation_id,
            "start": spec.capacity.start.isoformat() if spec.capacity.start else None,
            "end": spec.capacity.end.isoformat() if spec.capacity.end else None,
            # A Capacity Block's fee as the stack gives it (AWS returns none for a purchased block).
            "upfront_fee_usd": spec.capacity.upfront_fee_usd,
            "initial_nodes": plan.initial_size,
            "schedule": [{"action": s.label, "at": s.start_time, "nodes": s.size} for s in plan.schedule],
        },
        "ami": {
            "id": spec.ami.ami_id,
            "region": spec.ami.region,
            "matrix_name": spec.ami.matrix_name,
            "matrix_version": spec.ami.matrix_version,
            "matrix_digest": spec.ami.matrix_digest,
        },
    }


def _lustre(spec: GpuClusterSpec, s3_link: str | None) -> dict[str, Any] | None:
    lustre = spec.lustre
    if lustre is None:
        return None
    return {
        "deployment_type": lustre.deployment_type,
        "storage_capacity_gib": lustre.storage_capacity_gib,
        "throughput_per_tib": lustre.throughput_per_tib,
        "throughput_mbps": lustre_rules.baseline_throughput_mbps(lustre),
        "lustre_version": lustre.lustre_version,
        "efa_enabled": lustre.efa_enabled,
        "s3_link": s3_link,
    }
