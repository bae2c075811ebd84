"""Dollars per GPU-hour for the stack's capacity type, and what that makes of held and unused hours.

- On-Demand and an On-Demand Capacity Reservation bill the instance's On-Demand rate per
  instance-hour (an ODCR whether or not an instance runs in it:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html),
  so a GPU-hour costs the instance-hour price over the type's GPUs.
- A Capacity Block is paid up front for its whole span. AWS exposes the fee only on offerings
  (DescribeCapacityBlockOfferings' `UpfrontFee`); a purchased block (DescribeCapacityBlocks'
  `CapacityBlock`, DescribeCapacityReservations) carries none in botocore's EC2 model, so the fee
  (the amount paid, as the purchase showed it) comes from the stack's `gpuforge:capacity.upfrontFeeUsd`,
  or from --capacity-block-fee, which overrides it. A GPU-hour then costs the fee over the block's
  hours x nodes x GPUs per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.stack_config import StackConfig
from gpuforge.usage.prices import Price


@dataclass(frozen=True)
class Rate:
    usd_per_gpu_hour: float | None  # None: "no price"
    source: str
    price: Price | None = None

    def dollars(self, gpu_seconds: float) -> float | None:
        return None if self.usd_per_gpu_hour is None else round(gpu_seconds / 3600 * self.usd_per_gpu_hour, 2)

    def to_json(self) -> dict[str, Any]:
        return {
            "usd_per_gpu_hour": self.usd_per_gpu_hour,  # unrounded: the rate every cost was computed with
            "source": self.source,
            **({} if self.price is None else {"on_demand": self.price.to_json()}),
        }


def capacity_block_rate(config: StackConfig, gpus_per_node: int, fee_flag_usd: float | None) -> Rate:
    """The block's rate from `fee_flag_usd` (--capacity-block-fee) when given, else the stack's upfrontFeeUsd."""
    capacity = config.capacity
    assert capacity.start is not None and capacity.end is not None  # CapacitySpec requires them
    fee_usd, given_by = fee_flag_usd, "--capacity-block-fee"
    if fee_usd is None:
        # The stack file by its name in the stack folder: the report names no path of the machine it ran on.
        fee_usd, given_by = (
            capacity.upfront_fee_usd,
            f"gpuforge:capacity.upfrontFeeUsd in Pulumi.{config.stack}.yaml",
        )
    if fee_usd is None:
        return Rate(
            None,
            "no price: a Capacity Block is paid by its upfront fee, which AWS returns only for offerings, "
            "not for a purchased block; set gpuforge:capacity.upfrontFeeUsd in the stack or pass "
            "--capacity-block-fee USD (the fee the purchase showed)",
        )
    hours = (capacity.end - capacity.start).total_seconds() / 3600
    gpu_hours = hours * config.node_count * gpus_per_node
    return Rate(
        fee_usd / gpu_hours,
        f"Capacity Block upfront fee ${fee_usd:,.2f} ({given_by}) over {hours:g} h x "
        f"{config.node_count} nodes x {gpus_per_node} GPUs",
    )


def on_demand_rate(price: Price | None, source: str, gpus_per_node: int) -> Rate:
    if price is None:
        return Rate(None, source)
    return Rate(
        price.usd_per_hour / gpus_per_node,
        f"On-Demand ${price.usd_per_hour}/instance-hour: {source}",
        price,
    )
