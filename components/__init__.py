"""Pulumi components for EFA GPU training clusters on AWS.

`GpuCluster` builds a whole cluster from one `GpuClusterSpec`; the parts are
usable on their own: `ClusterNetwork`, `Placement`, `GpuNodeGroup`,
`LustreStorage`, `DataBucket`, `SlurmController`. Every component validates its inputs at
construction and raises `gpuforge.errors.InputError` naming the input and the fix.
"""

from gpuforge.components.bucket import DataBucket, DataBucketArgs
from gpuforge.components.cluster import GpuCluster
from gpuforge.components.efa_layout import InterfaceSlot, interface_layout
from gpuforge.components.lustre import LustreStorage, LustreStorageArgs
from gpuforge.components.network import ClusterNetwork, ClusterNetworkArgs
from gpuforge.components.nodes import FileSystemMount, GpuNodeGroup, GpuNodeGroupArgs, SlurmMembership
from gpuforge.components.placement import Placement, PlacementArgs
from gpuforge.components.slurm_controller import SlurmController, SlurmControllerArgs
from gpuforge.components.specs import (
    AmiPin,
    BucketSpec,
    CapacitySpec,
    GpuClusterSpec,
    LustreSpec,
    NetworkSpec,
    PartitionSpec,
    SchedulerSpec,
)

__all__ = [
    "AmiPin",
    "BucketSpec",
    "CapacitySpec",
    "ClusterNetwork",
    "ClusterNetworkArgs",
    "DataBucket",
    "DataBucketArgs",
    "FileSystemMount",
    "GpuCluster",
    "GpuClusterSpec",
    "GpuNodeGroup",
    "GpuNodeGroupArgs",
    "InterfaceSlot",
    "LustreSpec",
    "LustreStorage",
    "LustreStorageArgs",
    "NetworkSpec",
    "PartitionSpec",
    "Placement",
    "PlacementArgs",
    "SchedulerSpec",
    "SlurmController",
    "SlurmControllerArgs",
    "SlurmMembership",
    "interface_layout",
]
