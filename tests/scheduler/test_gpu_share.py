"""Each GPU's share of a node in the rendered slurm.conf, for the catalog's real instance types, without daemons.

The figures are computed here from the catalog row by the rule the share follows (whole cores per GPU with
their threads; the node's RealMemory per GPU), and the rendered files are read back: slurm.conf's DefCpuPerGPU
and DefMemPerGPU and the node's registration line, which must agree with each other. That Slurm gives each job
these shares is proved with real daemons in test_slurm_share_and_grace.py.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from gpuforge import hardware
from gpuforge.components.specs import SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.scheduler.gpu_share import REAL_MEMORY_RATIO
from gpuforge.scheduler.render import SlurmCluster, SlurmSite, node_registration, render_files

SITE = SlurmSite(controller_host="t-slurmctld", controller_addr="10.0.0.10")


def _cluster(instance: hardware.InstanceType) -> SlurmCluster:
    return SlurmCluster(
        name="tc",
        instance_type=instance,
        capacity_type="on-demand",
        max_nodes=4,
        scheduler=SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge"),
        slurm_version="26.05.5",
        site=SITE,
    )


def _settings(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=(\S+)$", text, re.M))


@pytest.mark.parametrize(
    "name", ["p5.48xlarge", "p4d.24xlarge", "p6-b300.48xlarge", "g6.48xlarge", "g6.xlarge", "g5.12xlarge"]
)
def test_each_gpu_gets_its_whole_cores_and_its_part_of_real_memory(name: str) -> None:
    instance = hardware.get(name)
    cluster = _cluster(instance)
    conf = _settings(render_files(cluster)["slurm.conf"])
    node = dict(field.split("=", 1) for field in node_registration(cluster).split())
    real_memory = math.floor(instance.memory_mib * REAL_MEMORY_RATIO)
    cpus_per_gpu = instance.cores // instance.gpu_count * instance.threads_per_core
    memory_per_gpu = real_memory // instance.gpu_count
    assert (conf["DefCpuPerGPU"], conf["DefMemPerGPU"]) == (str(cpus_per_gpu), str(memory_per_gpu))
    # Memory is consumable, or DefMemPerGPU and RealMemory would set nothing aside (slurm.conf(5), RealMemory).
    assert conf["SelectTypeParameters"] == "CR_Core_Memory"
    # One GPU job per GPU fits the node the node registers, with nothing left idle but the memory's remainder.
    assert node["RealMemory"] == str(real_memory) and node["CPUs"] == str(instance.vcpus)
    assert instance.gpu_count * cpus_per_gpu <= int(node["CPUs"])
    assert instance.gpu_count * memory_per_gpu <= real_memory < instance.gpu_count * (memory_per_gpu + 1)
    # Whole cores: under CR_Core a job's CPUs are rounded up to whole cores, so a share in part-cores would not fit.
    assert cpus_per_gpu % instance.threads_per_core == 0 and cpus_per_gpu >= instance.threads_per_core


def test_every_catalog_type_is_shared_with_no_core_left_over() -> None:
    """Every GPU type gpuforge knows splits its cores evenly among its GPUs, so the shares use the whole node."""
    for instance in hardware.catalog().values():
        conf = _settings(render_files(_cluster(instance))["slurm.conf"])
        assert instance.gpu_count * int(conf["DefCpuPerGPU"]) == instance.vcpus, instance.name


def test_no_other_memory_default_is_rendered() -> None:
    """DefMemPerCPU, DefMemPerGPU and DefMemPerNode are mutually exclusive (slurm.conf(5)); cons_tres ignores a
    global DefMemPerGPU where DefMemPerCPU is set (_set_gpu_defaults, src/plugins/select/cons_tres/job_test.c)."""
    text = render_files(_cluster(hardware.get("p5.48xlarge")))["slurm.conf"]
    assert "DefMemPerCPU" not in text and "DefMemPerNode" not in text
    assert text.count("DefMemPerGPU=") == 1 and text.count("DefCpuPerGPU=") == 1


def test_a_type_with_fewer_cores_than_gpus_is_refused() -> None:
    p5 = hardware.get("p5.48xlarge")
    small = dataclasses.replace(p5, name="x.test", cores=4, vcpus=8)
    with pytest.raises(InputError) as caught:
        _cluster(small)
    message = caught.value.message
    assert "4 cores for 8 GPUs" in message and "CR_Core_Memory" in message and "Fix:" in message
