"""The Slurm controller under the policy pack: slurm-controller-cpu, and the node rules on its instance and groups."""

from __future__ import annotations

from policy_helpers import (
    INGRESS,
    INSTANCE,
    Images,
    edit,
    mandatory,
    of,
    record_cluster,
    spec,
    verdicts,
)

from gpuforge.components import SchedulerSpec

RESERVED = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}


def _slurm(controller_type: str) -> SchedulerSpec:
    return SchedulerSpec(type="slurm", controller_instance_type=controller_type)


def test_a_cpu_controller_passes_every_rule(images: Images) -> None:
    resources = record_cluster(spec(images, capacity=RESERVED, scheduler=_slurm("m7i.2xlarge")))
    assert any(resource.type == INSTANCE for resource in resources)
    # m7i.2xlarge is not in the GPU hardware catalog: efa-network-interfaces leaves the controller alone,
    # and its security groups open nothing to the internet (node-open-ingress, efa-security-group pass).
    assert verdicts(resources, images) == []


def test_a_gpu_controller_is_warned_about(images: Images) -> None:
    resources = record_cluster(spec(images, capacity=RESERVED, scheduler=_slurm("g6.xlarge")))
    [verdict] = of(verdicts(resources, images), "slurm-controller-cpu")
    assert verdict.enforcement == "advisory"
    (controller,) = [resource for resource in resources if resource.name == "demo-slurm-instance"]
    assert verdict.urn == controller.urn
    assert "the Slurm controller runs on g6.xlarge, a GPU type (1 x NVIDIA L4)" in verdict.message
    assert "Fix: set gpuforge:scheduler.controllerInstanceType to a CPU type" in verdict.message
    assert mandatory(verdicts(resources, images)) == []


def test_an_unknown_type_on_a_gpu_node_is_still_refused(images: Images) -> None:
    """The exemption is the controller's alone: an untagged instance of an unknown type is still reported."""
    resources = record_cluster(
        spec(images, capacity=RESERVED, scheduler=_slurm("m7i.2xlarge")),
        edit(
            INSTANCE, tags=lambda tags: {key: value for key, value in tags.items() if key != "gpuforge:role"}
        ),
    )
    [verdict] = of(verdicts(resources, images), "efa-network-interfaces")
    assert "instance type 'm7i.2xlarge' is not in gpuforge's hardware catalog" in verdict.message
    assert of(verdicts(resources, images), "slurm-controller-cpu") == []


def test_slurm_s_port_opened_to_the_internet_fails(images: Images) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED, scheduler=_slurm("m7i.2xlarge")),
        edit(
            INGRESS,
            name_suffix="-slurm-in-slurmctld",
            referenced_security_group_id=None,
            cidr_ipv4="0.0.0.0/0",
        ),
    )
    [verdict] = of(verdicts(resources, images), "node-open-ingress")
    assert verdict.enforcement == "mandatory"
    assert "'demo-slurm-in-slurmctld'" in verdict.message and "lets 0.0.0.0/0 into" in verdict.message
