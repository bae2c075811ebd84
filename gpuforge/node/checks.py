"""The node check's list of checks, in report order, and the function that runs them."""

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


def run_checks(ctx: NodeContext, checks: tuple[Check, ...] = CHECKS) -> NodeReport:
    return NodeReport(ctx.instance.name, tuple(check(ctx) for check in checks))
