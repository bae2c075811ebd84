"""Hostile stack values through `gpuforge scheduler render`, read by the real slurmctld.

For every generated stack (its name, its partitions' names and MaxTime, and the network
node names of a saved topology response given with --topology; newlines, `#`,
`=`, spaces, Unicode digits, Slurm's keywords, very long values, and valid values at
the edges of the rules), either gpuforge refuses with exit 2 and a message that names
the value's rule and its fix, or slurmctld (the Slurm of the test root) starts on the
rendered files with no error and reports back exactly the cluster name, partitions,
time limits and switches the stack and the response asked for. Never a file Slurm rejects or reads differently.

Each accepted example starts one slurmctld in its own network namespace (about 0.1 s,
see slurm_cluster.read_by_slurmctld) and stops it by its pid. The number of examples
is bounded (GPUFORGE_SLURM_FUZZ_EXAMPLES, default 40) so the test takes seconds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fuzzing import FUZZ
from hypothesis import event, given, settings
from hypothesis import strategies as st
from slurm_cluster import (
    DEFAULT_ROOT,
    REPO,
    SlurmTestCluster,
    open_cluster,
    read_by_slurmctld,
    unavailable_reason,
)
from stack_files import slurm_stack

from gpuforge.cli import main
from gpuforge.scheduler import slurm_values

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

EXAMPLES = int(os.environ.get("GPUFORGE_SLURM_FUZZ_EXAMPLES", "40"))
# The controller's address in a stack's own VPC (gpuforge.scheduler.stack): 10.0.0.0/17 + 10.
CONTROLLER_ADDRESS = "10.0.0.10"

# Pieces Slurm reads as something else, and pieces of valid values, joined at random.
HOSTILE = [
    "\n",
    "\r",
    "\t",
    " ",
    "#",
    "=",
    ",",
    ":",
    "[1-3]",
    "ALL",
    "DEFAULT",
    "default",
    "gpunodes",
    "Nodes=ALL",
    "\n" + "PartitionName=evil",
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\U0001d7d9",  # MATHEMATICAL DOUBLE-STRUCK DIGIT ONE
    "\u00e9",
    "\u212a",  # KELVIN SIGN, which case-insensitive ASCII patterns can match as 'k'
    "x" * 300,
]
PIECES = [
    "gpu",
    "batch",
    "a",
    "p5",
    "-",
    "_",
    "0",
    "1",
    "2",
    "23",
    "59",
    "60",
    "99999",
    "UNLIMITED",
    "INFINITE",
]
_joined = st.lists(st.sampled_from(HOSTILE + PIECES), min_size=1, max_size=5).map("".join)
STACK_NAMES = st.one_of(
    st.from_regex(slurm_values.CLUSTER_NAME.pattern, fullmatch=True),
    _joined.filter(lambda name: "/" not in name and "\x00" not in name),
)
PARTITION_NAMES = st.one_of(st.from_regex(slurm_values.PARTITION_NAME.pattern, fullmatch=True), _joined)
MAX_TIMES = st.one_of(
    st.none(),
    st.from_regex(slurm_values.MAX_TIME.pattern, fullmatch=True),
    _joined,
)
# Four distinct valid network node names, one of them sometimes replaced by a hostile one.
_VALID_SWITCHES = st.lists(
    st.from_regex(slurm_values.SWITCH_NAME.pattern, fullmatch=True), min_size=4, max_size=4, unique=True
)
SWITCH_NAMES = st.builds(
    lambda names, hostile: [*names[: hostile[0]], hostile[1], *names[hostile[0] + 1 :]] if hostile else names,
    _VALID_SWITCHES,
    st.one_of(st.none(), st.tuples(st.integers(0, 3), _joined)),
)


def _topology(names: list[str]) -> dict[str, object]:
    """A DescribeInstanceTopology answer for two p5 instances, three layers each as AWS reports them."""
    top, middle, *leaves = names
    return {
        "Instances": [
            {
                "InstanceId": f"i-0123456789abcdef{index}",
                "InstanceType": "p5.48xlarge",
                "NetworkNodes": [top, middle, leaf],
                "AvailabilityZone": "us-east-1a",
                "ZoneId": "use1-az1",
            }
            for index, leaf in enumerate(leaves)
        ]
    }


TOPOLOGIES = st.one_of(st.none(), SWITCH_NAMES.map(_topology))  # None: no --topology
PARTITIONS = st.lists(
    st.fixed_dictionaries({"name": PARTITION_NAMES, "maxTime": MAX_TIMES}), min_size=0, max_size=3
)


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmTestCluster]:
    with open_cluster(tmp_path_factory.mktemp("slurm-read"), ROOT, REPO / "gpuforge") as test_cluster:
        test_cluster.write_key()
        yield test_cluster


def _stack_dir(base: Path, stack: str, partitions: list[dict[str, str | None]]) -> Path:
    scheduler: dict[str, object] = {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"}
    if partitions:
        scheduler["partitions"] = [{k: v for k, v in p.items() if v is not None} for p in partitions]
    config = slurm_stack(**{"gpuforge:scheduler": scheduler})
    base.mkdir(parents=True, exist_ok=True)
    (base / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
    with contextlib.suppress(OSError):  # a name no file system takes: gpuforge must refuse it all the same
        (base / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return base


def _minutes(max_time: str) -> int | None:
    """A MaxTime in minutes as slurm.conf(5) defines its forms (seconds round up); None for UNLIMITED."""
    if max_time in ("UNLIMITED", "INFINITE"):
        return None
    days, _, clock = max_time.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return int(days) * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)
    if len(parts) == 3:  # hours:minutes:seconds
        return parts[0] * 60 + parts[1] + math.ceil(parts[2] / 60)
    if len(parts) == 2:  # minutes:seconds
        return parts[0] + math.ceil(parts[1] / 60)
    return parts[0]


def _slurm_minutes(shown: str) -> int | None:
    """`scontrol show partition`'s MaxTime ([days-]hours:minutes:seconds, or UNLIMITED) in minutes."""
    if shown == "UNLIMITED":
        return None
    match = re.fullmatch(r"(?:([0-9]+)-)?([0-9]+):([0-9]{2}):([0-9]{2})", shown)
    assert match is not None, f"scontrol printed MaxTime={shown!r}"
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return days * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)


@settings(FUZZ, max_examples=EXAMPLES)
@given(stack=STACK_NAMES, partitions=PARTITIONS, topology=TOPOLOGIES)
def test_slurm_reads_what_the_stack_says_or_gpuforge_refuses(
    controller: SlurmTestCluster,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    stack: str,
    partitions: list[dict[str, str | None]],
    topology: dict[str, object] | None,
) -> None:
    base = tmp_path_factory.mktemp("stack")
    out = base / "out"
    extra = []
    if topology is not None:
        (base / "topology.json").write_text(json.dumps(topology), encoding="utf-8")
        extra = ["--topology", str(base / "topology.json")]
    code = main(
        [
            "scheduler",
            "render",
            str(_stack_dir(base / "stack", stack, partitions)),
            f"--stack={stack}",  # one word, so a name starting with '-' is not read as an option
            "--out",
            str(out),
            *extra,
        ]
    )
    printed = capsys.readouterr()
    if code != 0:
        event("refused by gpuforge")
        assert code == 2, printed.err
        assert "Fix:" in printed.err and "Traceback" not in printed.err, printed.err
        assert not out.exists() or not any(out.iterdir()), "a refused render wrote files"
        return
    files = {
        path.name: path.read_text(encoding="utf-8") for path in out.iterdir() if path.name.endswith(".conf")
    }
    event("read by slurmctld" + (" with a topology" if topology is not None else ""))
    read = read_by_slurmctld(controller, files, host=f"{stack}-slurmctld", address=CONTROLLER_ADDRESS)
    assert read.accepted and not read.errors, f"gpuforge wrote files slurmctld refused:\n{read.log[-3000:]}"
    assert read.config.get("ClusterName") == stack
    wanted = partitions or [{"name": "gpu", "maxTime": None}]
    assert sorted(read.partitions) == sorted(str(p["name"]) for p in wanted)
    for partition in wanted:
        max_time = partition["maxTime"]
        shown = read.partitions[str(partition["name"])]["MaxTime"]
        assert _slurm_minutes(shown) == (None if max_time is None else _minutes(max_time)), (max_time, shown)
    if topology is not None:
        entries = topology["Instances"]
        assert isinstance(entries, list)
        assert read.switches == {node for entry in entries for node in entry["NetworkNodes"]}
