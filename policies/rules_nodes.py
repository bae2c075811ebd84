"""Per-node rules on launch templates and instances: EFA interfaces, IMDSv2, public IPs, disks, capacity.

Every value these rules read is a literal the program writes (instance type,
interface cards and indices, metadata options, disk flags, market type), so they
are known during `pulumi preview` and the mandatory rules stay mandatory there. A
value that is not known at preview is reported as such: a node's security
settings must not depend on a value nobody can see before the update.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge import hardware
from gpuforge.components.efa_layout import LAYOUT_SOURCE, interface_layout
from gpuforge.errors import UnknownInstanceType
from gpuforge.policies import aws_types
from gpuforge.policies.node_settings import NodeSettings, for_each_node
from gpuforge.policies.props import UNKNOWN, at, flag, integer, is_set, items, show, text

EFA_TYPES = ("efa", "efa-only")
IMDS_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html"
CAPACITY_BLOCK_MARKET = "capacity-block"
CAPACITY_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks.html"


@dataclass(frozen=True)
class Slot:
    """One launch-template network interface: card, device index, interface type."""

    card: int
    device: int
    interface_type: str

    @property
    def carries_efa(self) -> bool:
        return self.interface_type in EFA_TYPES

    def __str__(self) -> str:
        return f"{self.interface_type} at card {self.card} device {self.device}"


def _slots(interfaces: list[object]) -> list[Slot] | str:
    """The template's interfaces as slots, or why they cannot be read at preview."""
    slots = []
    for index, interface in enumerate(interfaces):
        card = integer(at(interface, "networkCardIndex"))
        device = integer(at(interface, "deviceIndex"))
        kind = text(at(interface, "interfaceType"))
        if interface is UNKNOWN or card is UNKNOWN or device is UNKNOWN or kind is UNKNOWN:
            return f"network_interfaces[{index}] is not known at preview"
        # Unset card and device indices are 0, an unset type is an ENA interface (EC2's defaults).
        slots.append(Slot(card or 0, device or 0, str(kind or "interface")))
    return slots


def _ranges(numbers: list[int]) -> str:
    """`1-3, 7` for [1, 2, 3, 7]: readable lists of card indices."""
    parts: list[str] = []
    for number in sorted(numbers):
        if parts and number == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{number}"
        else:
            parts.append(str(number))
    return ", ".join(parts)


def interface_problems(instance: hardware.InstanceType, slots: list[Slot]) -> list[str]:
    """What is wrong with `slots` for an EFA-capable `instance`; [] when every EFA is attached right.

    Both of AWS's layouts pass: the current one (ENA primary at card 0 device 0, efa-only at
    card 0 device 1 and at device 0 on every other EFA card) and the older one (EFA primary
    at card 0 device 0, the others at device index 1).
    """
    cards = {card.index: card for card in instance.network_cards}
    efa_cards = [card.index for card in instance.efa_cards]
    problems: list[str] = []
    for (card_index, device), count in Counter((slot.card, slot.device) for slot in slots).items():
        if count > 1:
            problems.append(f"{count} interfaces share card {card_index} device {device}")
    for slot in slots:
        card = cards.get(slot.card)
        if card is None:
            problems.append(f"{slot}: {instance.name} has no card {slot.card} (cards 0-{len(cards) - 1})")
        elif slot.interface_type not in card.interface_types:
            problems.append(f"{slot}: card {slot.card} takes {'/'.join(card.interface_types)}")
        if slot.carries_efa and slot.device not in (0, 1):
            problems.append(f"{slot}: an EFA sits at device index 0 or 1 of its card")
    for index, count in Counter(slot.card for slot in slots).items():
        if index in cards and count > cards[index].maximum_interfaces:
            problems.append(
                f"card {index} holds {count} interfaces, its limit is {cards[index].maximum_interfaces}"
            )
    primary = [slot for slot in slots if (slot.card, slot.device) == (0, 0)]
    if not primary:
        problems.append("no primary interface at card 0 device 0")
    elif primary[0].interface_type == "efa-only":
        problems.append("the primary interface (card 0 device 0) is efa-only, which can't be primary")
    efa_per_card = Counter(slot.card for slot in slots if slot.carries_efa)
    missing = [index for index in efa_cards if efa_per_card[index] == 0]
    doubled = [index for index in efa_cards if efa_per_card[index] > 1]
    stray = [index for index in efa_per_card if index not in efa_cards]
    attached = sum(efa_per_card.values())
    if missing:
        problems.append(
            f"{instance.name} takes one EFA on each of its {len(efa_cards)} EFA cards "
            f"({_ranges(efa_cards)}), but {attached} {'is' if attached == 1 else 'are'} attached: "
            f"none on card{'s' if len(missing) > 1 else ''} {_ranges(missing)}"
        )
    if doubled:
        problems.append(f"more than one EFA on card {_ranges(doubled)}")
    if stray:
        problems.append(f"EFA on card {_ranges(stray)}, which takes none on {instance.name}")
    return problems


def _expected(instance: hardware.InstanceType) -> str:
    slots = interface_layout(instance)
    shown = ", ".join(
        f"{slot.interface_type}@{slot.network_card_index}/{slot.device_index}" for slot in slots[:4]
    )
    more = f", ... ({len(slots)} in all)" if len(slots) > 4 else ""
    return f"type@card/device: {shown}{more}"


@for_each_node
def validate_efa_interfaces(
    node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation
) -> None:
    type_name = text(node.get("instanceType"))
    if type_name is None:
        return  # a template without a type, or an instance that takes its template's
    if type_name is UNKNOWN:
        report(
            f"{node.field('instanceType')} is not known at preview, so nobody can check its EFA interfaces. "
            "Fix: write the instance type as a literal.",
            None,
        )
        return
    try:
        instance = hardware.get(str(type_name))
    except UnknownInstanceType as error:
        # The hardware catalog holds GPU types; the Slurm controller's CPU type has no EFA to check
        # (slurm-controller-cpu warns when a controller is given a GPU type).
        if not node.is_slurm_controller:
            report(f"cannot check the EFA interfaces: {error.message}", None)
        return
    if not (instance.efa_supported and instance.efa_cards):
        return
    fix = (
        f"Fix: attach every EFA the type has in the launch template's network_interfaces "
        f"({_expected(instance)}); GpuNodeGroup lays them out from the hardware catalog (source: {LAYOUT_SOURCE})."
    )
    if not node.is_template:
        where = (
            "over its launch template, whose interfaces are laid out for the template's own type"
            if node.from_template
            else "without a launch template; gpuforge checks EFA interfaces where they are literals"
        )
        report(f"the {node.kind} sets the EFA-capable type {instance.name} {where}. {fix}", None)
        return
    slots = _slots(items(node.get("networkInterfaces")))
    if isinstance(slots, str):
        report(f"{slots}, so nobody can check the EFA interfaces of {instance.name}. {fix}", None)
        return
    if not slots:
        report(
            f"no network_interfaces: {instance.name} then launches with one ENA interface and none of its "
            f"{len(instance.efa_cards)} EFA interfaces. {fix}",
            None,
        )
        return
    problems = interface_problems(instance, slots)
    if problems:
        report("; ".join(problems) + f". {fix}", None)


@for_each_node
def validate_imdsv2(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    if node.left_to_template("metadataOptions"):
        return
    if node.in_fleet:
        report(
            f"{node.prefix.rstrip('.')}: a Spot Fleet launch specification cannot set metadata_options, so its "
            "nodes answer IMDSv1 requests, which need no session token, unless the account's default says "
            "otherwise. Fix: launch the fleet from a launch template (launch_template_configs) that sets "
            f"metadata_options.http_tokens to 'required' (source: {IMDS_SOURCE}).",
            None,
        )
        return
    tokens = text(node.get("metadataOptions", "httpTokens"))
    endpoint = text(node.get("metadataOptions", "httpEndpoint"))
    if tokens == "required" or endpoint == "disabled":
        return
    found = show(UNKNOWN) if endpoint is UNKNOWN else show(tokens)
    report(
        f"metadata_options.http_tokens is {found}, so the node answers IMDSv1 requests, which need no "
        f"session token. Fix: set metadata_options.http_tokens to 'required' (source: {IMDS_SOURCE}).",
        None,
    )


@for_each_node
def validate_no_public_ip(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    fix = "Fix: set associate_public_ip_address to false; nodes reach AWS APIs through endpoints or a NAT gateway."
    if not node.is_template:
        if node.left_to_template("associatePublicIpAddress"):
            return
        raw = node.get("associatePublicIpAddress")
        if flag(raw) is not False:
            report(
                f"{node.field('associatePublicIpAddress')} is {show(raw)}; unset, the subnet decides. {fix}",
                None,
            )
        return
    interfaces = items(node.get("networkInterfaces"))
    if not interfaces:
        report(
            "the launch template declares no network_interfaces, so the subnet decides whether nodes get a "
            f"public IP. {fix} (on the primary interface)",
            None,
        )
        return
    for index, interface in enumerate(interfaces):
        raw = at(interface, "associatePublicIpAddress")
        value = flag(raw)
        card, device = integer(at(interface, "networkCardIndex")), integer(at(interface, "deviceIndex"))
        primary = (card or 0, device or 0) == (0, 0)
        if value is True or value is UNKNOWN or (primary and value is not False):
            report(f"network_interfaces[{index}].associate_public_ip_address is {show(raw)}. {fix}", None)


@for_each_node
def validate_ebs_encrypted(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    fix = "Fix: set encrypted to true on every EBS volume, the root volume included."
    if node.is_template:
        volumes = [
            (f"block_device_mappings[{index}].ebs.encrypted", at(mapping, "ebs", "encrypted"))
            for index, mapping in enumerate(items(node.get("blockDeviceMappings")))
            if is_set(at(mapping, "ebs"))
        ]
        if not volumes:
            report(
                "no block_device_mappings with an EBS volume: the root volume's encryption then follows "
                f"the AMI's snapshot and the account default. {fix}",
                None,
            )
            return
    else:
        volumes = [
            (f"{node.prefix}ebs_block_devices[{index}].encrypted", at(device, "encrypted"))
            for index, device in enumerate(items(node.get("ebsBlockDevices")))
        ]
        if node.in_fleet:
            roots = items(node.get("rootBlockDevices")) or [None]  # none given: the AMI's root, unencrypted
            volumes[:0] = [
                (f"{node.prefix}root_block_devices[{index}].encrypted", at(device, "encrypted"))
                for index, device in enumerate(roots)
            ]
        elif not node.left_to_template("rootBlockDevice"):
            volumes.insert(0, ("root_block_device.encrypted", node.get("rootBlockDevice", "encrypted")))
    for name, value in volumes:
        if flag(value) is not True:
            report(f"{name} is {show(value)}. {fix}", None)


@for_each_node
def validate_capacity(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    type_name = text(node.get("instanceType"))
    if not isinstance(type_name, str):
        return
    try:
        instance = hardware.get(type_name)
    except UnknownInstanceType:
        return  # efa-network-interfaces names unknown types
    if instance.family != "p":
        return
    market = text(node.get("instanceMarketOptions", "marketType"))
    if node.resource_type in (aws_types.SPOT_INSTANCE_REQUEST, aws_types.SPOT_FLEET_REQUEST) or is_set(
        node.get("spotPrice")
    ):
        market = "spot"  # a spot request or fleet, or a launch configuration with a spot price, buys Spot
    target = node.get("capacityReservationSpecification", "capacityReservationTarget")
    reserved = is_set(at(target, "capacityReservationId")) or is_set(
        at(target, "capacityReservationResourceGroupArn")
    )
    if market is None and not reserved:
        report(
            f"{instance.name} nodes on plain On-Demand, with no Capacity Reservation or Capacity Block: "
            "P-family capacity is often not there when a job needs it. Plan it as a calendar exercise: "
            "buy a Capacity Block for ML for the job's dates or hold an On-Demand Capacity Reservation, "
            f"and set capacity.type accordingly (source: {CAPACITY_SOURCE}).",
            None,
        )


EFA_NETWORK_INTERFACES = ResourceValidationPolicy(
    name="efa-network-interfaces",
    description=(
        "Launch templates of EFA-capable instance types attach every EFA interface the type has: one "
        "efa or efa-only interface per EFA card, with valid card and device indices. Instead of a partial "
        "or default interface list, declare the full layout in the launch template (GpuNodeGroup does)."
    ),
    validate=validate_efa_interfaces,
    enforcement_level=EnforcementLevel.MANDATORY,
)

IMDSV2_REQUIRED = ResourceValidationPolicy(
    name="imdsv2-required",
    description=(
        "Nodes require IMDSv2 session tokens. Instead of leaving metadata_options unset or 'optional', "
        "set metadata_options.http_tokens to 'required'."
    ),
    validate=validate_imdsv2,
    enforcement_level=EnforcementLevel.MANDATORY,
)

NO_PUBLIC_IP = ResourceValidationPolicy(
    name="no-public-ip",
    description=(
        "Nodes get no public IP address. Instead of leaving it to the subnet, set "
        "associate_public_ip_address to false on the primary interface and never true."
    ),
    validate=validate_no_public_ip,
    enforcement_level=EnforcementLevel.MANDATORY,
)

EBS_ENCRYPTED = ResourceValidationPolicy(
    name="ebs-encrypted",
    description=(
        "Every EBS volume of a node is encrypted. Instead of relying on the AMI's snapshot or the account "
        "default, map the root volume (and any other) with encrypted set to true."
    ),
    validate=validate_ebs_encrypted,
    enforcement_level=EnforcementLevel.MANDATORY,
)

P_FAMILY_CAPACITY = ResourceValidationPolicy(
    name="p-family-capacity",
    description=(
        "P-family nodes on plain On-Demand have no capacity guarantee. Instead, reserve the capacity: a "
        "Capacity Block for ML or an On-Demand Capacity Reservation."
    ),
    validate=validate_capacity,
    enforcement_level=EnforcementLevel.ADVISORY,
)
