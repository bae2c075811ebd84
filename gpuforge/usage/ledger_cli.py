"""`gpuforge capacity-ledger STACK_DIR --stack NAME`: append the stack's current capacity to its
capacity ledger (gpuforge.usage.ledger), so reports of past windows keep the prices they had.

Run it whenever the stack's `gpuforge:capacity` changes, and commit the ledger with the stack file.
A Capacity Block's window and fee come from the stack (`start`, `end`, `upfrontFeeUsd`); an ODCR or
On-Demand period starts at --since and is priced at --usd-per-instance-hour, else at the shipped
On-Demand table's rate (gpuforge/data/prices.yaml, each row with its source). Recording the period the
ledger already ends with is a no-op; a new period closes an open last one at its start; a period that
overlaps a closed one is refused, because closed periods priced past reports and are not edited here.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.errors import InputError
from gpuforge.flag_types import plain

if TYPE_CHECKING:
    from gpuforge.usage.ledger import Period


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "capacity-ledger",
        help="record the stack's current capacity in its capacity ledger",
        description="Appends the stack's current Capacity Block, ODCR or On-Demand period, with its window "
        "and price, to capacity-ledger.NAME.yaml beside the stack (README, 'Usage and cost'). Exit 0 when "
        "recorded or already there; 2 for bad input.",
    )
    parser.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    parser.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    parser.add_argument(
        "--since",
        metavar="T",
        help="when an ODCR or On-Demand period began (ISO 8601 with a zone); a block's comes from the stack",
    )
    parser.add_argument(
        "--usd-per-instance-hour",
        type=plain(float),
        metavar="USD",
        help="the instance-hour rate billed for an ODCR or On-Demand period (default: the shipped table's)",
    )
    parser.set_defaults(handler=_record)


def _new_period(args: argparse.Namespace) -> Period:
    from gpuforge.stack_config import load_stack_config
    from gpuforge.usage.ledger import Period
    from gpuforge.usage.prices import table_price
    from gpuforge.usage.window import parse_time

    config = load_stack_config(args.stack_dir, args.stack)
    capacity = config.capacity
    if capacity.type == "capacity-block":
        if args.since is not None or args.usd_per_instance_hour is not None:
            raise InputError(
                "--since and --usd-per-instance-hour are for ODCR and On-Demand periods: a Capacity Block's "
                f"window and fee come from gpuforge:capacity in {config.source}. Fix: leave them out."
            )
        assert capacity.start is not None and capacity.end is not None  # CapacitySpec requires them
        if capacity.upfront_fee_usd is None:
            raise InputError(
                f"{config.source}: gpuforge:capacity.upfrontFeeUsd is not set, and the ledger prices a block by "
                "its fee. Fix: set it to the fee the purchase showed, then record again."
            )
        return Period(
            "capacity-block",
            capacity.reservation_id,
            config.instance_type,
            config.node_count,
            capacity.start,
            capacity.end,
            capacity.upfront_fee_usd,
        )
    if args.since is None:
        raise InputError(
            f"--since: stack {args.stack}'s capacity is {capacity.type}, which has no dates in the stack. "
            "Fix: pass --since with the time it began, e.g. --since 2026-12-04T11:30:00Z."
        )
    start = parse_time("--since", args.since)
    usd = args.usd_per_instance_hour
    if usd is None:
        price = table_price(config.instance_type, config.region)
        if price is None:
            raise InputError(
                f"--usd-per-instance-hour: the shipped price table has no {config.instance_type} in "
                f"{config.region}. Fix: pass --usd-per-instance-hour with the rate billed."
            )
        usd = price.usd_per_hour
    if not (math.isfinite(usd) and usd > 0):
        raise InputError(
            f"--usd-per-instance-hour {usd}: a rate is a finite amount in USD above 0. Fix: pass the rate billed."
        )
    reservation = capacity.reservation_id if capacity.type == "reservation" else None
    return Period(capacity.type, reservation, config.instance_type, config.node_count, start, None, usd)


def _record(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import yaml

    from gpuforge.atomic import write_text_atomic
    from gpuforge.display import printable
    from gpuforge.loading import parse_yaml
    from gpuforge.usage.ledger import FIX, ledger_path, parse_ledger, read_ledger

    path = ledger_path(args.stack_dir, args.stack)
    periods = list(read_ledger(path) or ())
    new = _new_period(args)
    if periods and periods[-1] == new:
        print(
            printable(f"{path}: already ends with {new.name} from {new.start.isoformat()}; nothing to record")
        )
        return 0
    if periods:
        last = periods[-1]
        if last.end is None and new.start > last.start:
            periods[-1] = replace(last, end=new.start)  # the open period ends where the new one begins
        elif last.end is None or new.start < last.end:
            ends = "is open" if last.end is None else f"ends {last.end.isoformat()}"
            raise InputError(
                f"{path}: the new period {new.name} from {new.start.isoformat()} does not start after the "
                f"last one ({last.name} from {last.start.isoformat()}, which {ends}); recorded periods priced "
                "past reports and are not changed by this command. Fix: record capacity in the order it "
                "happened, or correct the ledger by hand and commit the change with its reason."
            )
    periods.append(new)
    header = (
        f"# Capacity ledger of stack {args.stack}: every capacity period it has had, oldest first.\n"
        "# Written by `gpuforge capacity-ledger`; read by `gpuforge usage` (README, 'Usage and cost').\n"
    )
    text = yaml.safe_dump({"periods": [period.to_file() for period in periods]}, sort_keys=False)
    # Checked under every rule before it is written: a ledger the report would refuse is never written.
    parse_ledger(path, parse_yaml(header + text, source=str(path), fix=FIX, timestamps_as_text=True))
    write_text_atomic(path, header + text)
    print(printable(f"{path}: recorded {new.name} from {new.start.isoformat()}"))
    return 0
