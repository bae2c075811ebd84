"""The Slurm cluster of a stack, as its Pulumi program builds it, for rendering outside `pulumi up`.

Stacks create their own VPC (`NetworkSpec`'s default block), so the controller's fixed
address is known from the config alone: the private subnet's address plus the
controller's offset, the same function the SlurmController component uses.
"""

from __future__ import annotations

from gpuforge import hardware
from gpuforge.components.cluster_rules import private_subnet_block
from gpuforge.components.slurm_controller import controller_address, slurm_cluster
from gpuforge.components.specs import NetworkSpec
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.scheduler.render import SlurmCluster
from gpuforge.scheduler.topology import NetworkTopology
from gpuforge.stack_config import NAMESPACE, StackConfig, display_path


def stack_cluster(
    config: StackConfig, *, slurm_version: str | None = None, topology: NetworkTopology | None = None
) -> SlurmCluster:
    """The SlurmCluster of `config`; `slurm_version`, when given, must be the matrix's pin."""
    if config.scheduler.type != "slurm" or config.slurm_version is None:
        raise InputError(
            f"{config.source}: {NAMESPACE}:scheduler: stack {config.stack} has no Slurm scheduler "
            f"(type {config.scheduler.type!r}). Fix: set `{NAMESPACE}:scheduler: {{type: slurm, "
            "controllerInstanceType: m7i.2xlarge}` in the stack file."
        )
    if slurm_version is not None and slurm_version != config.slurm_version:
        raise InputError(
            f"--slurm-version {cut(slurm_version)}: the stack's matrix {display_path(config.matrix_path)} pins Slurm "
            f"{config.slurm_version}, and its image has that Slurm only. Fix: render for {config.slurm_version}, "
            "or pin the version you want in the matrix (slurm.version, .sha256, .url), check it and rebuild the image."
        )
    return slurm_cluster(
        config.stack,
        node_instance_type=hardware.get(config.instance_type),
        capacity_type=config.capacity.type,
        max_nodes=config.node_count,
        scheduler=config.scheduler,
        slurm_version=config.slurm_version,
        address=controller_address(str(private_subnet_block(NetworkSpec().vpc_cidr))),
        topology=topology,
    )
