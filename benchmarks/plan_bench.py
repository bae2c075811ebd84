"""Benchmark `gpuforge plan` on generated stacks of 8, 64, 512 and 2048 nodes, in both node modes.

For each size and mode it generates a stack (p5.48xlarge, On-Demand, PERSISTENT_2) beside
a copy of the real stacks/training program, and runs `gpuforge plan` on it in a fresh
Python process, printing:

- resources: how many resources the program registered;
- plan s: wall time of the whole plan (config, program under the mocks, policy pack);
  policies s: the policy pack's share of it;
- peak MiB: the largest Python heap the plan used (tracemalloc, in a second, untimed run);
- baseline s / MiB: the same number of bare resources (one aws.ec2.PlacementGroup each,
  no gpuforge code) registered by a minimal program under the same mocks and runner;
- overhead: plan time / baseline time.

Each process first plans a one-node stack (or registers one bare resource) so the
figures leave out imports and first-use costs. Usage, from the repository root:

    .venv/bin/python -P benchmarks/plan_bench.py [--nodes 8,64,512,2048] [--modes asg,instances]

(-P keeps this checkout's folders off sys.path, so the installed gpuforge is imported.)
It prints a table; it asserts nothing.

With `--margin A,B [--repeat R]` it instead compares a whole `gpuforge plan` (config, program
under the mocks, policy pack) of fixed-instances stacks of A and B nodes with TYPED_PROGRAM, the
same nodes written by hand with typed pulumi-aws classes and run under the same mocks, and
prints the median CPU seconds of R runs each (after a warm-up, in a fresh process per size),
the margin ((plan B - plan A) / (typed B - typed A): the cost of one more node) and the whole
ratio at B. CPU time, not wall time, since the machine is shared. Figures before and after
each change are in plan_results.md beside this file.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TRAINING = REPO / "stacks" / "training"
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"
REGION = "us-east-1"
PROJECT = "gpuforge-bench"

BASELINE_PROGRAM = """
import pulumi
import pulumi_aws as aws

count = pulumi.Config("bench").require_int("count")
for index in range(count):
    aws.ec2.PlacementGroup(f"bare-{index}", strategy="cluster", tags={"bench": str(index)})
"""

# The same nodes written by hand with typed pulumi-aws classes and no gpuforge code: what a
# user would write for fixed p5.48xlarge instances (one primary interface and 32 EFA-only
# interfaces on a launch template, a cluster placement group, one aws.ec2.Instance per node
# under a component). Each node adds the same one Instance as gpuforge's `instances` mode, so
# the difference between two sizes is the typed program's cost per node.
TYPED_PROGRAM = """
import pulumi
import pulumi_aws as aws

count = pulumi.Config("bench").require_int("count")
tags = {"gpuforge:cluster": "bench", "ManagedBy": "pulumi"}


class Nodes(pulumi.ComponentResource):
    def __init__(self, name):
        super().__init__("bench:index:Nodes", name)
        child = pulumi.ResourceOptions(parent=self)
        vpc = aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16", opts=child)
        subnet = aws.ec2.Subnet("subnet", vpc_id=vpc.id, cidr_block="10.0.0.0/20", opts=child)
        group = aws.ec2.SecurityGroup("efa", vpc_id=vpc.id, opts=child)
        placement = aws.ec2.PlacementGroup("placement", strategy="cluster", opts=child)
        interfaces = [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=card,
                device_index=1 if card == 0 and efa else 0,
                interface_type="efa-only" if efa else "interface",
                subnet_id=subnet.id,
                security_groups=[group.id],
                delete_on_termination="true",
                associate_public_ip_address=None if efa else "false",
            )
            for card, efa in [(0, False), *((card, True) for card in range(32))]
        ]
        template = aws.ec2.LaunchTemplate(
            "lt",
            image_id="ami-0be9c4f1a2b3c4d5e",
            instance_type="p5.48xlarge",
            network_interfaces=interfaces,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            tags=tags,
            opts=child,
        )
        version = template.latest_version.apply(str)
        nodes = [
            aws.ec2.Instance(
                f"node-{index}",
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=template.id, version=version),
                placement_group=placement.id,
                tags={**tags, "Name": f"node-{index}"},
                opts=child,
            )
            for index in range(count)
        ]
        self.ids = pulumi.Output.all(*(node.id for node in nodes)).apply(list)
        self.register_outputs({"ids": self.ids})


pulumi.export("ids", Nodes("bench").ids)
"""


def _stack_file(nodes: int, mode: str, catalog: Path) -> dict[str, Any]:
    return {
        "config": {
            "aws:region": REGION,
            "gpuforge:matrix": str(MATRIX),
            "gpuforge:instanceType": "p5.48xlarge",
            "gpuforge:nodeCount": nodes,
            "gpuforge:nodeMode": mode,
            "gpuforge:availabilityZone": f"{REGION}a",
            "gpuforge:capacity": {"type": "on-demand"},
            "gpuforge:lustre": {
                "deploymentType": "PERSISTENT_2",
                "storageCapacityGiB": 24000,
                "throughputPerTiB": 250,
            },
            "gpuforge:catalog": str(catalog),
        }
    }


def _prepare(workdir: Path, sizes: list[int], modes: list[str]) -> tuple[Path, Path]:
    """A stack directory with one stack file per case, its catalog, and the baseline program."""
    from gpuforge.images.catalog import CatalogEntry, now_utc, record_entry
    from gpuforge.images.matrix import load_valid

    catalog = workdir / "catalog.json"
    matrix, digest = load_valid(MATRIX)
    record_entry(
        catalog,
        CatalogEntry(
            ami_id="ami-0be9c4f1a2b3c4d5e",  # made up: no image is built for a benchmark
            region=REGION,
            matrix_name=matrix.name,
            matrix_version=matrix.version,
            matrix_digest=digest,
            built_at=now_utc(),
            packer_version="1.6.6",
        ),
    )
    stack_dir = workdir / "stack"
    stack_dir.mkdir()
    (stack_dir / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n", encoding="utf-8")
    (stack_dir / "__main__.py").write_text(
        (TRAINING / "__main__.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    for mode in modes:
        for nodes in [1, *sizes]:
            text = yaml.safe_dump(_stack_file(nodes, mode, catalog))
            (stack_dir / f"Pulumi.{_stack_name(nodes, mode)}.yaml").write_text(text, encoding="utf-8")
    baseline = workdir / "baseline" / "__main__.py"
    baseline.parent.mkdir()
    baseline.write_text(BASELINE_PROGRAM, encoding="utf-8")
    typed = workdir / "typed" / "__main__.py"
    typed.parent.mkdir()
    typed.write_text(TYPED_PROGRAM, encoding="utf-8")
    return stack_dir, baseline


def _stack_name(nodes: int, mode: str) -> str:
    return f"n{nodes}-{mode}"


def _child_plan(stack_dir: Path, nodes: int, mode: str) -> dict[str, Any]:
    from gpuforge.images.catalog import DEFAULT_CATALOG
    from gpuforge.plan.stack_plan import plan, policy_config
    from gpuforge.policies.runner import run_policies

    plan(stack_dir, _stack_name(1, mode))  # warm-up: imports and first use
    stack = _stack_name(nodes, mode)
    gc.collect()
    start = time.perf_counter()
    result = plan(stack_dir, stack)
    wall = time.perf_counter() - start
    start = time.perf_counter()
    run_policies(
        result.run.resources,
        policy_config(result.config.catalog_path or DEFAULT_CATALOG, result.config.region),
    )
    policies = time.perf_counter() - start
    resources = len(result.run.resources)
    del result
    gc.collect()
    tracemalloc.start()
    plan(stack_dir, stack)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"resources": resources, "wall_s": wall, "policies_s": policies, "peak_mib": peak / 2**20}


def _child_baseline(program: Path, count: int) -> dict[str, Any]:
    from gpuforge.plan.run import run_program

    def run(n: int) -> int:
        config = {"bench:count": str(n), "aws:region": REGION}
        return len(
            run_program(program, project=PROJECT, stack="baseline", config=config, region=REGION).resources
        )

    run(1)  # warm-up
    gc.collect()
    start = time.perf_counter()
    resources = run(count)
    wall = time.perf_counter() - start
    gc.collect()
    tracemalloc.start()
    run(count)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"resources": resources, "wall_s": wall, "peak_mib": peak / 2**20}


def _cpu_seconds(call: Any, repeat: int) -> float:
    """The median CPU time of `repeat` calls after one warm-up: CPU time, not wall time, so that
    the other users of a shared machine inflate it less."""
    call()
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _child_margin(stack_dir: Path, typed: Path, nodes: int, repeat: int) -> dict[str, Any]:
    """CPU seconds of a whole plan (config, program, policies) and of the typed program, at `nodes`."""
    from gpuforge.plan.run import run_program
    from gpuforge.plan.stack_plan import plan

    plan(stack_dir, _stack_name(1, "instances"))  # imports and first use
    planned = _cpu_seconds(lambda: plan(stack_dir, _stack_name(nodes, "instances")), repeat)
    config = {"bench:count": str(nodes), "aws:region": REGION}
    hand = _cpu_seconds(
        lambda: run_program(typed, project=PROJECT, stack="typed", config=config, region=REGION), repeat
    )
    return {"plan_s": planned, "typed_s": hand}


def _margin(stack_dir: Path, sizes: list[int], repeat: int) -> None:
    """Plan against the hand-written typed program: per added node (the margin) and whole."""
    typed = stack_dir.parent / "typed" / "__main__.py"
    low, high = (_in_child("margin", str(stack_dir), str(typed), str(nodes), str(repeat)) for nodes in sizes)
    margin = (high["plan_s"] - low["plan_s"]) / (high["typed_s"] - low["typed_s"])
    print(
        f"instances {sizes[0]} -> {sizes[1]} nodes, median CPU s of {repeat}: plan {low['plan_s']:.3f} -> "
        f"{high['plan_s']:.3f}, typed pulumi-aws {low['typed_s']:.3f} -> {high['typed_s']:.3f}; "
        f"margin {margin:.2f}x, whole at {sizes[1]} nodes {high['plan_s'] / high['typed_s']:.2f}x",
        flush=True,
    )


def _in_child(*args: str) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter, so no case inherits another's heap or caches."""
    completed = subprocess.run(
        [sys.executable, "-P", __file__, "--child", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="8,64,512,2048", help="comma-separated node counts")
    parser.add_argument("--modes", default="asg,instances", help="comma-separated node modes")
    parser.add_argument(
        "--margin",
        help="two node counts A,B: compare plan with the typed pulumi-aws program between them, instead of the table",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case for --margin (median)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        kind, *rest = args.child
        if kind == "plan":
            figures = _child_plan(Path(rest[0]), int(rest[1]), rest[2])
        elif kind == "margin":
            figures = _child_margin(Path(rest[0]), Path(rest[1]), int(rest[2]), int(rest[3]))
        else:
            figures = _child_baseline(Path(rest[0]), int(rest[1]))
        print(json.dumps(figures))
        return 0

    if args.margin:
        low, high = (int(value) for value in args.margin.split(","))
        with tempfile.TemporaryDirectory(prefix="gpuforge-bench-") as temp:
            stack_dir, _ = _prepare(Path(temp), [low, high], ["instances"])
            _margin(stack_dir, [low, high], args.repeat)
        return 0

    sizes = [int(value) for value in args.nodes.split(",")]
    modes = args.modes.split(",")
    header = (
        f"{'nodes':>6} {'mode':>9} {'resources':>9} {'plan s':>8} {'policies s':>10} {'peak MiB':>9}"
        f" {'baseline s':>10} {'base MiB':>9} {'overhead':>8}"
    )
    print(f"gpuforge plan benchmark: p5.48xlarge, On-Demand, PERSISTENT_2; Python {sys.version.split()[0]}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="gpuforge-bench-") as temp:
        stack_dir, baseline = _prepare(Path(temp), sizes, modes)
        for mode in modes:
            for nodes in sizes:
                ours = _in_child("plan", str(stack_dir), str(nodes), mode)
                bare = _in_child("baseline", str(baseline), str(ours["resources"]))
                print(
                    f"{nodes:>6} {mode:>9} {ours['resources']:>9} {ours['wall_s']:>8.2f} {ours['policies_s']:>10.2f}"
                    f" {ours['peak_mib']:>9.1f} {bare['wall_s']:>10.2f} {bare['peak_mib']:>9.1f}"
                    f" {ours['wall_s'] / bare['wall_s']:>7.1f}x",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
