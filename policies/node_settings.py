"""A launch template's or an instance's own settings, for the per-node resource policies.

Node rules (AMI, EFA interfaces, metadata, public IP, disks) run on both launch
templates and instances. An instance launched from a template takes every setting
it leaves unset from the template, and the template is checked on its own; so a
setting an instance leaves to its template is the template's business, not the
instance's.

The Slurm controller is an instance too (SlurmController tags it
`gpuforge:role = slurm-controller`, without a launch template): it gets every node
rule, except that its CPU type need not be in the GPU hardware catalog.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from gpuforge.components.slurm_controller import CONTROLLER_ROLE, ROLE_TAG
from gpuforge.policies import aws_types
from gpuforge.policies.props import at, is_set, items, snake, text

# Where each setting lives, by resource type (camelCased, as the engine sends props).
AMI_FIELD = {
    aws_types.LAUNCH_TEMPLATE: "imageId",
    aws_types.INSTANCE: "ami",
    aws_types.SPOT_INSTANCE_REQUEST: "ami",
    aws_types.LAUNCH_CONFIGURATION: "imageId",
    aws_types.SPOT_FLEET_REQUEST: "ami",  # in each launch specification
}
_KINDS = {
    aws_types.LAUNCH_TEMPLATE: "launch template",
    aws_types.INSTANCE: "instance",
    aws_types.SPOT_INSTANCE_REQUEST: "spot instance request",
    aws_types.LAUNCH_CONFIGURATION: "launch configuration",
    aws_types.SPOT_FLEET_REQUEST: "spot fleet launch specification",
}


@dataclass(frozen=True)
class NodeSettings:
    resource_type: str
    props: Any
    prefix: str = ""
    """Where these settings sit in the resource, for messages: `launch_specifications[1].` in a Spot Fleet."""

    @classmethod
    def of(cls, args: ResourceValidationArgs) -> NodeSettings | None:
        """The settings of a launch template, an instance or another launcher (`aws_types.NODES`); None for
        any other resource."""
        if args.resource_type not in aws_types.NODES:
            return None
        return cls(args.resource_type, args.props)

    @classmethod
    def each(cls, args: ResourceValidationArgs) -> list[NodeSettings]:
        """Every node `args` describes: one for a launcher of `aws_types.NODES`, one per launch
        specification of a Spot Fleet request, none for any other resource."""
        if args.resource_type == aws_types.SPOT_FLEET_REQUEST:
            return [
                cls(args.resource_type, spec, f"launch_specifications[{index}].")
                for index, spec in enumerate(items(at(args.props, "launchSpecifications")))
            ]
        node = cls.of(args)
        return [] if node is None else [node]

    @property
    def kind(self) -> str:
        return _KINDS[self.resource_type]

    @property
    def in_fleet(self) -> bool:
        """A Spot Fleet launch specification: an instance's settings, but no metadata options and a list
        of root volumes (`root_block_devices`)."""
        return self.resource_type == aws_types.SPOT_FLEET_REQUEST

    @property
    def is_template(self) -> bool:
        """A launch template, whose settings sit under network_interfaces and block_device_mappings; the
        other launchers carry an instance's top-level settings."""
        return self.resource_type == aws_types.LAUNCH_TEMPLATE

    @property
    def from_template(self) -> bool:
        """An instance (or spot instance request) launched from a launch template."""
        return self.resource_type in aws_types.INSTANCES and is_set(at(self.props, "launchTemplate"))

    @property
    def is_slurm_controller(self) -> bool:
        """An instance of its own (no launch template) tagged as the cluster's Slurm controller."""
        return (
            self.resource_type == aws_types.INSTANCE
            and not self.from_template
            and text(self.get("tags", ROLE_TAG)) == CONTROLLER_ROLE
        )

    def get(self, *path: str) -> Any:
        return at(self.props, *path)

    def left_to_template(self, *path: str) -> bool:
        """True when an instance leaves this setting to its launch template."""
        return self.from_template and not is_set(self.get(*path))

    def field(self, *path: str) -> str:
        """A setting's name as a Python program writes it: `metadata_options.http_tokens`, with the
        launch specification's place in a Spot Fleet in front."""
        return self.prefix + ".".join(snake(part) for part in path)


NodeCheck = Callable[[NodeSettings, ResourceValidationArgs, ReportViolation], None]


def for_each_node(check: NodeCheck) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    """A resource policy's `validate` that runs `check` on every node the resource describes
    (`NodeSettings.each`): a launcher's own settings, or each launch specification of a Spot Fleet."""

    @functools.wraps(check)
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for node in NodeSettings.each(args):
            check(node, args, report)

    return validate
