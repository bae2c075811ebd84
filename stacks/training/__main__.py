"""gpuforge training stack: one GpuCluster built from this stack's `gpuforge:` config.

`pulumi up` runs this file with the config of Pulumi.<stack>.yaml; `gpuforge plan`
runs the same file offline under the Pulumi SDK's mocks. Everything it does is in
gpuforge.stack_config (reading the config, resolving the AMI from the image catalog)
and gpuforge.components (the cluster).
"""

from pathlib import Path

import pulumi

from gpuforge.components import GpuCluster
from gpuforge.components.controller_monitoring import stack_monitoring
from gpuforge.errors import GpuforgeError
from gpuforge.stack_config import cluster_spec, resolve_ami, stack_config_from_pulumi

try:
    config = stack_config_from_pulumi(Path(__file__).resolve().parent)
    ami = resolve_ami(config)
    # The Slurm config is rendered for the Slurm the image carries (the matrix's slurm.version).
    # Prometheus, Alertmanager and the drain receiver on the controller, from gpuforge:monitoring.
    monitoring = stack_monitoring(config)
    cluster = GpuCluster(
        config.stack, cluster_spec(config, ami), slurm_version=config.slurm_version, monitoring=monitoring
    )
except GpuforgeError as error:
    # RunError ends the update with the message alone: bad input gets no traceback.
    raise pulumi.RunError(error.message) from error

pulumi.export("summary", cluster.summary)
# The rendered Slurm files by name ({} without Slurm): `pulumi stack output slurm_config`.
pulumi.export("slurm_config", cluster.slurm_config)
