"""The node check's lists of checks, in report order, and the function that runs them.

`CHECKS` is the boot gate: everything, once per boot, before the node joins
Slurm. `PERIODIC_CHECKS` is what `--slurm` (Slurm's HealthCheckProgram) runs
every HealthCheckInterval on a node that may be running a job. It keeps the
checks whose verdict can change while the node is up (a GPU falling off the
bus, ECC and row-remapper state, Xids, a driver upgraded under the running
module, a dead service, a lost EFA device or mount) and leaves out those that
either cannot change after boot or would misjudge a busy node:

- gpu.clocks judges clocks *at idle*; under a job, power capping is normal.
- image.manifest and kernel.modules compare the booted image, kernel and loaded
  modules with the manifest; they change only at the next boot.
- topology runs `nvidia-smi topo -m` (seconds on 8 GPUs) for wiring that is
  fixed hardware; a GPU that drops out shows in gpu.inventory and xid.
- efa.gpudirect reads the efa driver's peer-memory provider, fixed at load.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuforge.node import efa, gpus, services, storage, topology, versions, xid
from gpuforge.node.context import NodeContext
from gpuforge.node.report import CheckResult, NodeReport

Check = Callable[[NodeContext], CheckResult]

CHECKS: tuple[Check, ...] = (
    gpus.check_inventory,
    gpus.check_ecc,
    gpus.check_row_remapping,
    gpus.check_clocks,
    versions.check_driver_versions,
    versions.check_image,
    versions.check_modules,
    services.check_persistenced,
    services.check_fabricmanager,
    services.check_nvlsm,
    efa.check_devices,
    efa.check_gpudirect,
    xid.check_xid,
    topology.check_topology,
    storage.check_scratch,
    storage.check_fsx,
)

PERIODIC_CHECKS: tuple[Check, ...] = (
    gpus.check_inventory,
    gpus.check_ecc,
    gpus.check_row_remapping,
    versions.check_driver_versions,
    services.check_persistenced,
    services.check_fabricmanager,
    services.check_nvlsm,
    efa.check_devices,
    xid.check_xid,
    storage.check_scratch,
    storage.check_fsx,
)


def run_checks(ctx: NodeContext, checks: tuple[Check, ...] = CHECKS) -> NodeReport:
    return NodeReport(ctx.instance.name, tuple(check(ctx) for check in checks))
