"""The root volume every gpuforge image is built with, and so the smallest root an instance of it may have.

EC2 makes an instance's root volume from the AMI's root snapshot, and a volume made from a snapshot
cannot be smaller than the snapshot ("the size of the new volume must be equal to or larger than the
snapshot size": https://docs.aws.amazon.com/ebs/latest/userguide/ebs-creating-volume.html), so a GPU
node or a Slurm controller with a smaller root fails to launch. The image build (images/render.py)
and the components (components/nodes.py, components/slurm_controller.py) read this one figure.
"""

from __future__ import annotations

# CUDA toolkit, cuDNN, NCCL, DCGM and the driver take roughly 20 GiB installed; the rest leaves room
# for container images pulled at boot (and, on the controller, Prometheus's data).
ROOT_VOLUME_GIB = 100
SNAPSHOT_SOURCE = "https://docs.aws.amazon.com/ebs/latest/userguide/ebs-creating-volume.html"
