"""`gpuforge usage STACK_DIR --stack NAME`: GPU-hours, useful fraction, idle, unused reserved hours,
failures and cost over a window (README, "Usage and cost").

On the controller (sacct on PATH, no --sacct-json) it runs sacct and sacctmgr itself and reads the
controller's Prometheus (127.0.0.1:9090) when the stack has monitoring; elsewhere it takes
--sacct-json, --events and --prometheus. Exit 0 with a report (a window with no jobs is a report of
zeros); 2 for bad input, naming the flag or file, the field and the fix.
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.flag_types import plain

if TYPE_CHECKING:
    from gpuforge.stack_config import StackConfig
    from gpuforge.usage.events import NodeEvent
    from gpuforge.usage.ledger import Period
    from gpuforge.usage.report import Ledger
    from gpuforge.usage.reservations import Reserved
    from gpuforge.usage.sacct import Job
    from gpuforge.usage.window import Window

CONTROLLER_PROMETHEUS = "http://127.0.0.1:9090"  # gpuforge.monitoring.prometheus: --web.listen-address


def register(subparsers: Any) -> None:
    from gpuforge.usage.report import GROUPINGS

    parser = subparsers.add_parser(
        "usage",
        help="GPU-hours held, useful and idle, unused reserved hours, failures and cost over a window",
        description="Reads Slurm's accounting (sacct --json), the node event history (sacctmgr show event) and "
        "the metrics layer's per-job recording rules (Prometheus), and reports per job, user, team (Slurm account) "
        "or partition. Exit 0 with a report; 2 for bad input (the flag or file, the field and the fix).",
    )
    parser.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    parser.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    parser.add_argument(
        "--since",
        metavar="T",
        help="window start: YYYY-MM-DD (00:00 UTC) or ISO 8601 with a zone; default a week before --until",
    )
    parser.add_argument(
        "--until", metavar="T", help="window end, same forms; default now (a later one is clipped at now)"
    )
    parser.add_argument(
        "--by",
        default="team",
        metavar="|".join(GROUPINGS),
        help="group rows by (default team: the Slurm account)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (README: Usage and cost)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.svg",
        help="write stacked GPU-hours per group (--by) with axis values and dollars as SVG (.svg only)",
    )
    parser.add_argument(
        "--csv",
        type=Path,
        metavar="FILE.csv",
        help="also write the report for finance as CSV (RFC 4180): one row per group, the total and each "
        "ledger cost line, figures unrounded",
    )
    parser.add_argument(
        "--sacct-json",
        type=Path,
        metavar="FILE",
        help="`sacct --json --allusers --duplicates` output, in place of running sacct",
    )
    parser.add_argument(
        "--events",
        type=Path,
        metavar="FILE",
        help="`TZ=UTC sacctmgr --parsable2 show event ...` output (README)",
    )
    parser.add_argument(
        "--prometheus", metavar="URL", help="the cluster's Prometheus, e.g. http://127.0.0.1:9090"
    )
    parser.add_argument(
        "--capacity-block-fee",
        type=plain(float),
        metavar="USD",
        help="the upfront fee paid for the stack's Capacity Block (overrides gpuforge:capacity.upfrontFeeUsd); "
        "only for a stack whose capacity is a Capacity Block",
    )
    parser.set_defaults(handler=_usage)


def _checkpoint(config: StackConfig, history: list[NodeEvent] | None, window: Window) -> dict[str, Any]:
    """gpuforge.checkpoint's advice for a job on every node (the call `gpuforge plan` makes too), with
    the MTBF from the window's event history when it holds enough failures, else the published figure."""
    from gpuforge.checkpoint import stack_advice
    from gpuforge.checkpoint.advice import KEY

    advice = stack_advice(config, history, window)
    if advice is None:
        return {"checkpoint_note": f"none: the stack sets no {KEY} (README, 'Checkpoint interval')"}
    return {"checkpoint": advice}


def _check_fee_amount(fee: float | None) -> None:
    """--capacity-block-fee is a finite amount above 0 (argparse's float takes inf, nan and 1e999)."""
    if fee is not None and not (math.isfinite(fee) and fee > 0):
        raise InputError(
            f"--capacity-block-fee {fee}: a fee is a positive amount in USD (a finite number above 0). "
            "Fix: pass the fee the purchase showed."
        )


def _check_fee_applies(fee: float | None, config: StackConfig) -> None:
    """--capacity-block-fee only where there is a block to pay for: elsewhere it would be ignored."""
    if fee is not None and config.capacity.type != "capacity-block":
        raise InputError(
            f"--capacity-block-fee {fee}: stack {config.stack}'s gpuforge:capacity.type is {config.capacity.type}, "
            "not capacity-block, so there is no block fee to price (On-Demand capacity and reservations are "
            "priced at the On-Demand rate). Fix: leave the flag out, or pass the --stack whose capacity is the block."
        )


def _check_plot_format(plot: Path | None) -> None:
    """--plot writes SVG; gpuforge has no PNG encoder (a rasteriser is a heavy dependency), so another
    name is refused before any work rather than written with SVG bytes a PNG reader cannot open."""
    if plot is not None and plot.suffix.lower() != ".svg":
        raise InputError(
            f"--plot {plot}: the plot is SVG and gpuforge writes no {cut(plot.suffix or 'suffix-less')} file. "
            f"Fix: pass a name ending in .svg (e.g. --plot {plot.with_suffix('.svg').name}); to get a PNG, "
            "convert the SVG with an SVG converter you have."
        )


def _priced_by_ledger(
    periods: tuple[Period, ...], file: str, jobs: list[Job], by: str, window: Window, now: datetime
) -> tuple[Ledger, Reserved | None]:
    """The window cut at the ledger's periods, each part's GPU-seconds per group, and the reservation
    the ledger's reserved periods make of it. Every hour must be covered: a price guessed for an hour
    the ledger does not know is the defect the ledger exists to end."""
    from gpuforge.usage.ledger import uncovered
    from gpuforge.usage.report import CostLine, Ledger, group_jobs
    from gpuforge.usage.reservations import Reserved
    from gpuforge.usage.window import Window

    gap = uncovered(periods, window)
    if gap is not None:
        raise InputError(
            f"{file}: no period covers {gap.since.isoformat()} to {gap.until.isoformat()} of the window, so those "
            "hours have no price. Fix: add the capacity the stack had then to the ledger (README, 'Usage and "
            "cost'), or pass a --since/--until the ledger covers."
        )
    lines = []
    for period in periods:
        span = period.span(window)
        if span is None:
            continue
        groups, total = group_jobs(jobs, by, span, now, None)
        lines.append(
            CostLine(period, span, {g.name: g.gpu_seconds_held for g in groups}, total.gpu_seconds_held)
        )
    held = [line for line in lines if line.gpu_seconds_reserved]
    if not held:
        return Ledger(file, tuple(lines)), None
    reserved = Reserved(
        ", ".join(dict.fromkeys(line.period.kind for line in held)),
        Window(held[0].span.since, held[-1].span.until),
        max(line.period.gpus for line in held),
        sum(line.gpu_seconds_reserved for line in held),
        sum(line.gpu_seconds_held for line in held),
        "from the capacity ledger: " + "; ".join(line.period.name for line in held),
    )
    return Ledger(file, tuple(lines)), reserved


def _usage(args: argparse.Namespace) -> int:
    from gpuforge import hardware
    from gpuforge.monitoring.config import stack_monitoring_config
    from gpuforge.stack_config import load_stack_config
    from gpuforge.svg import write_plot
    from gpuforge.usage import events, metrics, prices, sacct
    from gpuforge.usage.cost import Rate, capacity_block_rate, on_demand_rate
    from gpuforge.usage.csv_report import write_csv
    from gpuforge.usage.ledger import ledger_path, read_ledger
    from gpuforge.usage.plot import render_svg
    from gpuforge.usage.records import screen
    from gpuforge.usage.report import GROUPINGS, UsageReport, failures, group_jobs, render_text
    from gpuforge.usage.reservations import reserved
    from gpuforge.usage.window import window as make_window

    if args.by not in GROUPINGS:
        raise InputError(
            f"--by {args.by}: not a grouping. Fix: pass --by with one of {', '.join(GROUPINGS)}."
        )
    _check_fee_amount(args.capacity_block_fee)
    _check_plot_format(args.plot)
    now = datetime.now(UTC)
    asked = make_window(args.since, args.until, now=now)
    window = asked.window
    config = load_stack_config(args.stack_dir, args.stack)
    if config.scheduler.type != "slurm":
        raise InputError(
            f"{config.source}: gpuforge:scheduler.type is {config.scheduler.type}: the usage report reads Slurm's "
            "accounting. Fix: run it for a stack with `gpuforge:scheduler: {type: slurm, ...}`."
        )
    ledger_file = ledger_path(args.stack_dir, args.stack)
    periods = read_ledger(ledger_file)
    if periods is not None and args.capacity_block_fee is not None:
        raise InputError(
            f"--capacity-block-fee {args.capacity_block_fee}: stack {args.stack} has a capacity ledger "
            f"({ledger_file.name}), which holds each block's fee. Fix: leave the flag out, or correct the "
            "period's upfrontFeeUsd in the ledger."
        )
    _check_fee_applies(args.capacity_block_fee, config)
    cluster = config.stack  # gpuforge names the Slurm cluster (ClusterName) after the stack
    gpus_per_node = hardware.get(config.instance_type).gpu_count
    on_controller = args.sacct_json is None
    records_source = "sacct --json" if on_controller else str(args.sacct_json)
    read = sacct.run_sacct(window) if on_controller else sacct.read_sacct(args.sacct_json)
    jobs, records = screen(read, cluster=cluster, stack=args.stack, source=records_source)
    history = (
        events.read_events(args.events, cluster=cluster)
        if args.events is not None
        else events.run_sacctmgr(window, cluster=cluster)
        if on_controller
        else None
    )
    url = args.prometheus
    if url is None and on_controller and stack_monitoring_config(config).enabled:
        url = CONTROLLER_PROMETHEUS
    per_job = (
        None if url is None else metrics.job_metrics(url, window, max_gpus=config.node_count * gpus_per_node)
    )
    ledger, ledger_note = None, None
    if periods is not None:
        ledger, reserve = _priced_by_ledger(periods, ledger_file.name, jobs, args.by, window, now)
        rates = {line.period.usd_per_gpu_hour for line in ledger.lines}
        rate = Rate(
            rates.pop() if len(rates) == 1 else None,
            f"capacity ledger {ledger_file.name}: each hour at the rate of the period that held it (cost lines)",
        )
    else:
        ledger_note = (
            f"none ({ledger_file.name} beside the stack): priced from today's stack file, which is right only "
            "if its capacity held for the whole window (README, 'Usage and cost')"
        )
        reserve = reserved(config, gpus_per_node, jobs, window, now)
        if config.capacity.type == "capacity-block":
            rate = capacity_block_rate(config, gpus_per_node, args.capacity_block_fee)
        else:
            price, source = prices.price(config.instance_type, config.region, client=prices.pricing_client())
            rate = on_demand_rate(price, source, gpus_per_node)
    groups, total = group_jobs(jobs, args.by, window, now, per_job)
    report = UsageReport(
        stack=args.stack,
        window=window,
        by=args.by,
        groups=tuple(groups),
        total=total,
        metrics_source=None if url is None else f"Prometheus {url}",
        reserved=reserve,
        failures=failures(jobs, history, window),
        rate=rate,
        records=records,
        until_requested=asked.until_requested,
        window_note=asked.note,
        ledger=ledger,
        ledger_note=ledger_note,
        **_checkpoint(config, history, window),
    )
    if args.plot is not None:
        write_plot(args.plot, render_svg(report))
    if args.csv is not None:
        write_csv(args.csv, report)
    if args.json:
        # allow_nan=False: a NaN or an infinity would make the output invalid JSON; every figure is
        # checked finite before this, so one here is a defect to stop on, not to print.
        print(json.dumps(report.to_json(), indent=2, allow_nan=False))
    else:
        print(render_text(report), end="")
    return 0
