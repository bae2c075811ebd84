"""Per-type all-reduce floors, from the hardware catalog's sourced `allreduce_floors` block.

Three figures per type, each the expected in-place busbw at the type's message size (1 GiB
unless the type says otherwise), each with its source:

- `single_node`: one node over NVLink;
- `multi_node`: two nodes over EFA. Every pair of nodes is judged against it (the fabric is
  judged pair by pair, so one slow node cannot hide in a large run);
- `cluster`: a run over 3 or more nodes, a model (a fraction of the 2-node figure) whose
  assumptions are written beside it in the catalog, looser because published runs over
  more nodes reach less than two nodes do.

A run fails below `fail_below_fraction` of its figure, or below a figure's explicit `floor`
where one is published (AWS's own pass line). `published_runs` lists the public healthy
runs of the type; a test feeds every one of them through `floor` and requires a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpuforge.errors import InputError
from gpuforge.hardware import CATALOG_FILE

# From this many nodes on, a run is judged against the looser `cluster` figure.
CLUSTER_NODES = 3


@dataclass(frozen=True)
class Figure:
    """One expected busbw (GB/s) and where it comes from; `floor` overrides the fraction where AWS publishes one."""

    busbw: float
    source: str
    floor: float | None = None
    floor_source: str | None = None


@dataclass(frozen=True)
class PublishedRun:
    """A public healthy run of the type: what it reached, where, and on how many nodes."""

    nodes: int
    busbw: float
    message_bytes: int
    source: str


@dataclass(frozen=True)
class Floors:
    """What an instance type must reach: one node (NVLink), a pair of nodes (EFA), and 3+ nodes."""

    instance_type: str
    message_bytes: int
    fail_below_fraction: float
    single_node: Figure
    multi_node: Figure
    cluster_fraction: float
    cluster_source: str
    published: tuple[PublishedRun, ...] = ()

    def figure(self, nodes: int) -> Figure:
        """The figure a run on `nodes` nodes is judged against."""
        if nodes == 1:
            return self.single_node
        if nodes < CLUSTER_NODES:
            return self.multi_node
        return Figure(self.multi_node.busbw * self.cluster_fraction, self.cluster_source)

    def floor(self, nodes: int) -> float:
        """The busbw below which a run on `nodes` nodes fails."""
        figure = self.figure(nodes)
        if figure.floor is not None:
            return figure.floor
        return round(figure.busbw * self.fail_below_fraction, 2)

    def basis(self, nodes: int) -> str:
        """How the floor for `nodes` nodes was set, for a failure message."""
        figure = self.figure(nodes)
        if figure.floor is not None:
            return f"a published pass line; the expected figure is {figure.busbw:.2f}"
        kind = "" if nodes < CLUSTER_NODES else f", the figure for {CLUSTER_NODES} or more nodes"
        return f"{self.fail_below_fraction:.0%} of the expected {figure.busbw:.2f}{kind}"

    def to_json(self) -> dict[str, Any]:
        def entry(nodes: int) -> dict[str, Any]:
            figure = self.figure(nodes)
            extra = {} if figure.floor_source is None else {"floor_source": figure.floor_source}
            return {"expected": figure.busbw, "floor": self.floor(nodes), "source": figure.source, **extra}

        return {
            "instance_type": self.instance_type,
            "message_bytes": self.message_bytes,
            "fail_below_fraction": self.fail_below_fraction,
            "single_node": entry(1),
            "multi_node": entry(2),
            "cluster": {
                "from_nodes": CLUSTER_NODES,
                "fraction": self.cluster_fraction,
                **entry(CLUSTER_NODES),
            },
            "published_runs": [
                {
                    "nodes": run.nodes,
                    "busbw": run.busbw,
                    "message_bytes": run.message_bytes,
                    "source": run.source,
                }
                for run in self.published
            ],
        }


@cache
def _block() -> dict[str, Any]:
    text = resources.files("gpuforge").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    block: dict[str, Any] = json.loads(text)["allreduce_floors"]
    return block


def _figure(raw: dict[str, Any]) -> Figure:
    floor = raw.get("floor")
    return Figure(
        busbw=float(raw["busbw"]),
        source=str(raw["source"]),
        floor=None if floor is None else float(floor),
        floor_source=None if floor is None else str(raw["floor_source"]),
    )


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
        message_bytes=int(row.get("message_bytes", block["message_bytes"])),
        fail_below_fraction=float(block["fail_below_fraction"]),
        single_node=_figure(row["single_node"]),
        multi_node=_figure(row["multi_node"]),
        cluster_fraction=float(block["cluster"]["fraction"]),
        cluster_source=str(block["cluster"]["source"]),
        published=tuple(
            PublishedRun(
                int(run["nodes"]), float(run["busbw"]), int(run["message_bytes"]), str(run["source"])
            )
            for run in row.get("published_runs", ())
        ),
    )
