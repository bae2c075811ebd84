"""Which network interfaces a node gets, on which card and device index, of which type.

The layout is AWS's current recommendation for EFA on instance types with several
network cards (Amazon EC2 User Guide, "Maximize network bandwidth on Amazon EC2
instances with multiple network cards",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html):

1. the primary interface is an ENA (`interface`) at network card 0, device index 0;
   an EFA-only interface can't be the primary interface;
2. if card 0 supports EFA, an `efa-only` interface at card 0, device index 1;
3. on every further EFA-capable card, an `efa-only` interface at device index 0.

An older edition of that page put an `efa` (EFA with ENA) interface at card 0 /
device 0 and the others at device index 1; gpuforge follows the current one
(both are recorded in shared/reference/compat_facts.yaml, section 8).

EFA-only interfaces take no IP address (same page), so a p5.48xlarge with 32 EFAs
uses one private IP. On a type with a single network card and EFA (g5.48xlarge,
g6.48xlarge), the one interface is `efa` (EFA with ENA) at card 0 / device 0, the
standard single-EFA launch (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html).
Types without EFA get one plain `interface`.

Card facts come only from the hardware catalog (`gpuforge.hardware`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from gpuforge import hardware
from gpuforge.errors import GpuforgeError

InterfaceType = Literal["interface", "efa", "efa-only"]

LAYOUT_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"


@dataclass(frozen=True)
class InterfaceSlot:
    """One launch-template network interface."""

    network_card_index: int
    device_index: int
    interface_type: InterfaceType

    @property
    def carries_efa(self) -> bool:
        return self.interface_type in ("efa", "efa-only")

    @property
    def takes_ip(self) -> bool:
        """EFA-only interfaces have no IP address; the others do."""
        return self.interface_type != "efa-only"


def interface_layout(instance: hardware.InstanceType) -> tuple[InterfaceSlot, ...]:
    """The interfaces a node of `instance` is launched with, primary first."""
    efa_cards = instance.efa_cards if instance.efa_supported else ()
    if not efa_cards:
        slots: tuple[InterfaceSlot, ...] = (InterfaceSlot(0, 0, "interface"),)
    elif len(instance.network_cards) == 1:
        slots = (InterfaceSlot(0, 0, "efa"),)
    else:
        slots = (
            InterfaceSlot(0, 0, "interface"),
            *(InterfaceSlot(card.index, 1 if card.index == 0 else 0, "efa-only") for card in efa_cards),
        )
    _check_fits(instance, slots)
    return slots


def efa_interface_count(instance: hardware.InstanceType) -> int:
    return sum(1 for slot in interface_layout(instance) if slot.carries_efa)


def _check_fits(instance: hardware.InstanceType, slots: tuple[InterfaceSlot, ...]) -> None:
    """The layout must fit the card limits the catalog states; if not, the catalog row is wrong."""
    limits = {card.index: card.maximum_interfaces for card in instance.network_cards}
    per_card = Counter(slot.network_card_index for slot in slots)
    efa = sum(1 for slot in slots if slot.carries_efa)
    problems = [
        f"card {card} gets {count} interfaces, its limit is {limits.get(card, 0)}"
        for card, count in sorted(per_card.items())
        if count > limits.get(card, 0)
    ]
    if len(slots) > instance.max_network_interfaces:
        problems.append(f"{len(slots)} interfaces exceed the type's {instance.max_network_interfaces}")
    if efa > instance.max_efa_interfaces and instance.efa_supported:
        problems.append(f"{efa} EFA interfaces exceed the type's {instance.max_efa_interfaces}")
    if problems:
        raise GpuforgeError(
            f"the hardware catalog row for {instance.name} does not fit AWS's EFA layout: "
            + "; ".join(problems)
            + f". Fix: regenerate the row with scripts/regen_instance_types.py (source: {instance.source})."
        )
