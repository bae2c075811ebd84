"""Placement: which placement group the nodes launch into, by capacity type.

- on-demand: a new placement group, strategy `cluster` (or `partition` for very
  large groups), so the nodes sit close together for EFA.
- reservation (ODCR): the reservation's own placement group where it has one,
  given as an input (preflight checks it against the reservation). No new group
  is made: a new group beside an ODCR can leave nodes without capacity, because
  instances launched into a group that is not the reservation's do not use it.
- capacity-block: no placement group. AWS places Capacity Block instances close
  together (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html),
  and a group can only add insufficient-capacity errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws

from gpuforge.components import cluster_rules
from gpuforge.components.specs import CapacitySpec, PlacementStrategy

TOKEN = "gpuforge:placement:Placement"

PlacementSource = Literal["created", "reservation", "none"]


@dataclass(frozen=True)
class PlacementArgs:
    instance_type: str
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    strategy: PlacementStrategy = "cluster"
    partition_count: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class Placement(pulumi.ComponentResource):
    """`group_name` is the group the nodes launch into, or None."""

    group_name: pulumi.Output[str | None]
    strategy: PlacementStrategy | None
    source: PlacementSource

    def __init__(self, name: str, args: PlacementArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        instance = cluster_rules.instance_type(args.instance_type)
        cluster_rules.check_placement(instance, args.strategy, args.partition_count, args.capacity)
        super().__init__(TOKEN, name, None, opts)

        if args.capacity.type == "on-demand":
            group = aws.ec2.PlacementGroup(
                f"{name}-group",
                strategy=args.strategy,
                partition_count=args.partition_count,
                tags={**args.tags, "Name": f"{name}-group"},
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.group_name = group.name
            self.strategy = args.strategy
            self.source = "created"
        elif args.capacity.type == "reservation" and args.capacity.placement_group is not None:
            self.group_name = pulumi.Output.from_input(args.capacity.placement_group)
            self.strategy = None  # the reservation's group; its strategy is the reservation's business
            self.source = "reservation"
        else:
            self.group_name = pulumi.Output.from_input(None)
            self.strategy = None
            self.source = "none"

        self.register_outputs(
            {"group_name": self.group_name, "strategy": self.strategy, "source": self.source}
        )
