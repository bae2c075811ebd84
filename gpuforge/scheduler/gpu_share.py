"""A GPU node's CPUs and memory shared out by GPU, and what the node keeps for itself.

Why: with `SelectType=select/cons_tres` and `CR_Core_Memory`, a job that names no memory gets a default from
DefMemPerCPU, DefMemPerGPU or DefMemPerNode, and all three default to 0, "unlimited" (slurm.conf(5) of Slurm
26.05), which cons_tres reads as the node's whole RealMemory. So a 1-GPU job without `--mem` blocked a
p5.48xlarge's other seven GPUs (tests/fixtures/accounting/sacct.json, captured on Slurm 26.05.5: every job,
1 or 2 GPUs, allocated mem=22899, the test node's whole RealMemory), a team's GPU quota (GrpTRES=gres/gpu=N)
did not bound what its jobs blocked, and GPU-hours under-billed them. slurm.conf's DefCpuPerGPU ("Default
count of CPUs allocated per allocated GPU. This value is used only if the job didn't specify --cpus-per-task
and --cpus-per-gpu") and DefMemPerGPU ("Default real memory size available per allocated GPU in mebibytes")
give each GPU a job asks for its share instead, so eight 1-GPU jobs fit on an 8-GPU node. Both came with
select/cons_tres (https://slurm.schedmd.com/cons_tres.html, "Additional parameters available for the
cons_tres plugin"; gpuforge's `cons_tres` feature row in gpuforge/data/slurm.yaml). The share is computed
here, once, from the hardware catalog row: slurm.conf renders it and the node registers the same totals.

What the node keeps for itself (the reserve):
- memory: RealMemory is the instance's memory x `REAL_MEMORY_RATIO`, and the GPUs share RealMemory. Lowering
  RealMemory is the way Slurm documents for "setting aside some amount for the OS and not available for job
  allocations", which works when memory is consumable (a `*_Memory` SelectTypeParameters; gpuforge renders
  CR_Core_Memory): slurm.conf(5), RealMemory. Not MemSpecLimit: it would also be taken out of RealMemory,
  but with task/cgroup and ConstrainRAMSpace it makes a memory cgroup of that size for slurmd ("the slurmd
  will be allocated the specified memory limit"; slurmstepd too only on cgroup v1), and what the node needs
  memory for is mostly outside slurmd: the kernel, the Lustre client, the NVIDIA and EFA drivers' pinned
  buffers, dcgm-exporter, the node agent. And RealMemory must be below the EC2 size anyway: the kernel reports
  less than the nominal size, and a node that registers less memory than its RealMemory is refused.
- CPUs: none. Every core is shared out, whole cores per GPU (cores // GPUs x threads per core): under CR_Core
  "The count of CPUs allocated to a job is rounded up to account for every CPU on an allocated core"
  (slurm.conf(5), CR_Core), so a share in part-cores would round up and eight such jobs would not fit.
  CoreSpecCount (cores "reserved for system use", https://slurm.schedmd.com/core_spec.html: "The job
  processes will not be able to directly use the specialized cores") was weighed and not taken: whole-core
  shares mean reserving even one core of a p5.48xlarge (96 cores, 12 per GPU) leaves 11 per GPU and idles 8,
  and on a 2-core 1-GPU type (g5.xlarge, g6.xlarge) it halves the job's CPUs; every 8-GPU training job pays
  it too. The node's own processes (slurmd, the node agent every HealthCheckInterval, dcgm-exporter) are
  small, and ConstrainCores confines jobs to their cores, not the system to others, so they still run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuforge.errors import InputError
from gpuforge.hardware import InstanceType

# Share of the instance's memory Slurm may hand to jobs; the rest is the OS's (kernel, page cache for the Lustre
# client, the NVIDIA and EFA drivers' pinned memory). AWS ParallelCluster uses the same ratio
# (realmemory_to_ec2memory_ratio = 0.95, in cookbooks/aws-parallelcluster-slurm/attributes/slurm_attributes.rb of
# aws/aws-parallelcluster-cookbook); a node whose real memory is below RealMemory is refused by Slurm, so the
# ratio must leave room below the nominal EC2 size.
REAL_MEMORY_RATIO = 0.95
SLURM_CONF_DOC = "https://slurm.schedmd.com/slurm.conf.html"


@dataclass(frozen=True)
class GpuShare:
    """What one GPU of a node brings a job that names no CPUs or memory, and the node's totals."""

    gpus: int
    cpus_per_gpu: int  # DefCpuPerGPU: whole cores' worth of CPUs
    memory_per_gpu_mib: int  # DefMemPerGPU
    real_memory_mib: int  # the node's RealMemory: what the GPUs share

    @property
    def node_cpus_shared(self) -> int:
        """The CPUs a job on every GPU of the node gets by default."""
        return self.gpus * self.cpus_per_gpu

    @property
    def node_memory_shared_mib(self) -> int:
        """The memory a job on every GPU of the node gets by default (at most RealMemory)."""
        return self.gpus * self.memory_per_gpu_mib


def real_memory_mib(instance: InstanceType) -> int:
    """The node's RealMemory: the instance's memory less what the node keeps for itself."""
    return math.floor(instance.memory_mib * REAL_MEMORY_RATIO)


def gpu_share(instance: InstanceType) -> GpuShare:
    """The per-GPU share of `instance`'s cores and RealMemory; InputError for a type with no whole core per GPU."""
    if instance.gpu_count < 1:
        raise InputError(
            f"instance type {instance.name} has no GPUs: Slurm's DefCpuPerGPU and DefMemPerGPU share a node by "
            "GPU. Fix: give the cluster a GPU instance type from gpuforge's catalog."
        )
    cores_per_gpu = instance.cores // instance.gpu_count
    if cores_per_gpu < 1:
        raise InputError(
            f"instance type {instance.name} has {instance.cores} cores for {instance.gpu_count} GPUs: no whole core "
            "per GPU, and with SelectTypeParameters=CR_Core_Memory Slurm allocates whole cores, so GPUs beyond the "
            f"cores could never be used by separate jobs. Fix: use a type with at least one core per GPU. "
            f"(source: {SLURM_CONF_DOC}#OPT_CR_Core)"
        )
    real_memory = real_memory_mib(instance)
    return GpuShare(
        gpus=instance.gpu_count,
        cpus_per_gpu=cores_per_gpu * instance.threads_per_core,
        memory_per_gpu_mib=real_memory // instance.gpu_count,
        real_memory_mib=real_memory,
    )
