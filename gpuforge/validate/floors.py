"""Per-type all-reduce floors, from the hardware catalog's sourced `allreduce_floors` block.

Each figure is the expected in-place busbw at the block's message size (1 GiB), with its
source: measured by AWS or NVIDIA where a public run exists, derived (and marked so)
where none does. A run fails below `fail_below_fraction` of the figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpuforge.errors import InputError
from gpuforge.hardware import CATALOG_FILE


@dataclass(frozen=True)
class Figure:
    """One expected busbw (GB/s) and where it comes from."""

    busbw: float
    source: str


@dataclass(frozen=True)
class Floors:
    """What an instance type must reach: single node (NVLink) and multi-node (EFA)."""

    instance_type: str
    message_bytes: int
    fail_below_fraction: float
    single_node: Figure
    multi_node: Figure

    def floor(self, nodes: int) -> float:
        """The busbw below which a run on `nodes` nodes fails."""
        figure = self.single_node if nodes == 1 else self.multi_node
        return round(figure.busbw * self.fail_below_fraction, 2)

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "message_bytes": self.message_bytes,
            "fail_below_fraction": self.fail_below_fraction,
            "single_node": {
                "expected": self.single_node.busbw,
                "floor": self.floor(1),
                "source": self.single_node.source,
            },
            "multi_node": {
                "expected": self.multi_node.busbw,
                "floor": self.floor(2),
                "source": self.multi_node.source,
            },
        }


@cache
def _block() -> dict[str, Any]:
    text = resources.files("gpuforge").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    block: dict[str, Any] = json.loads(text)["allreduce_floors"]
    return block


def floors_for(instance_type: str) -> Floors:
    """The floors of `instance_type`, or an error naming the types that have them."""
    block = _block()
    row = block["types"].get(instance_type)
    if row is None:
        known = ", ".join(sorted(block["types"]))
        raise InputError(
            f"--instance-type {instance_type}: gpuforge's hardware catalog ({CATALOG_FILE}, allreduce_floors) has "
            f"no all-reduce floor for it. Types with floors: {known}. Fix: use one of these, or add the type's "
            "single_node and multi_node busbw with their sources to that block."
        )
    return Floors(
        instance_type=instance_type,
        message_bytes=int(block["message_bytes"]),
        fail_below_fraction=float(block["fail_below_fraction"]),
        single_node=Figure(float(row["single_node"]["busbw"]), str(row["single_node"]["source"])),
        multi_node=Figure(float(row["multi_node"]["busbw"]), str(row["multi_node"]["source"])),
    )
