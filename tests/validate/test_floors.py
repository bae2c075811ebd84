"""The all-reduce floors: one per EFA type in the catalog, each figure with a source that says how it was got."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from gpuforge.errors import InputError
from gpuforge.hardware import CATALOG_FILE
from gpuforge.validate.floors import floors_for

CATALOG = json.loads(resources.files("gpuforge").joinpath(CATALOG_FILE).read_text(encoding="utf-8"))
EFA_TYPES = sorted(name for name, row in CATALOG["instance_types"].items() if row["aws"]["efa_supported"])


@pytest.mark.parametrize("instance_type", EFA_TYPES)
def test_every_efa_type_has_both_floors_with_a_kind_of_source(instance_type: str) -> None:
    floors = floors_for(instance_type)
    for figure in (floors.single_node, floors.multi_node):
        assert figure.busbw > 0
        assert figure.source.split(":")[0].split(",")[0] in {"measured", "published", "derived"}
    assert 0 < floors.floor(2) < floors.multi_node.busbw


def test_a_type_without_a_floor_names_those_that_have_one() -> None:
    with pytest.raises(InputError, match=r"g6\.xlarge.*Types with floors: g5\.12xlarge"):
        floors_for("g6.xlarge")


# Published healthy runs the issue names, each of which today's figures would have failed.
# (instance type, nodes, busbw GB/s, message size): the catalog's published_runs must carry them.
CITED_RUNS = [
    ("p6-b200.48xlarge", 4, 367.0, 1 << 30),  # awslabs/awsome-distributed-ai compute-test.md, 4 x p6-b200
    ("p4d.24xlarge", 4, 29.63, 1 << 30),  # NVIDIA/nccl#527, 4 x p4d
    ("p4d.24xlarge", 3, 31.75, 1 << 30),  # NVIDIA/nccl#527, 3 x p4d
    ("p6-b300.48xlarge", 2, 654.0, 16 << 30),  # compute-test.md, 2 x p6-b300 at 16 GiB
]


def _published() -> list[tuple[str, int, float, int, str]]:
    return [
        (name, run.nodes, run.busbw, run.message_bytes, run.source)
        for name in sorted(CATALOG["allreduce_floors"]["types"])
        for run in floors_for(name).published
    ]


@pytest.mark.parametrize(("instance_type", "nodes", "busbw", "size", "source"), _published())
def test_every_published_healthy_run_passes_its_floor(
    instance_type: str, nodes: int, busbw: float, size: int, source: str
) -> None:
    floors = floors_for(instance_type)
    assert size == floors.message_bytes, f"{source}: measured at {size} B, judged at {floors.message_bytes} B"
    assert busbw >= floors.floor(nodes), (
        f"{instance_type} x{nodes}: {busbw} < floor {floors.floor(nodes)} ({source})"
    )
    assert "http" in source


@pytest.mark.parametrize(("instance_type", "nodes", "busbw", "size"), CITED_RUNS)
def test_the_runs_the_issue_cites_are_recorded_and_pass(
    instance_type: str, nodes: int, busbw: float, size: int
) -> None:
    floors = floors_for(instance_type)
    assert (instance_type, nodes, busbw, size) in [row[:4] for row in _published()]
    assert floors.message_bytes == size and busbw >= floors.floor(nodes)


def test_a_pair_is_held_to_the_2_node_figure_and_a_large_run_to_the_looser_one() -> None:
    floors = floors_for("p6-b200.48xlarge")
    assert floors.floor(2) == round(631.17 * 0.9, 2)
    # Every run of 3+ nodes gets the same looser figure: half the 2-node one, less the 10% margin.
    assert floors.floor(3) == floors.floor(64) == round(631.17 * 0.5 * 0.9, 2)
    assert floors.floor(2) > floors.floor(3)
    document = floors.to_json()
    assert (
        document["cluster"]["floor"] == floors.floor(3) and "nccl/issues/527" in document["cluster"]["source"]
    )
    assert document["published_runs"][1]["nodes"] == 4


def test_p6_b200_single_node_floor_is_not_above_aws_nvlink_health_check() -> None:
    # AWS's NVLink-only check passes p6-b200 above 600 GB/s (5-nccl-allreduce.sh); a floor above that
    # would fail a node AWS calls healthy.
    floors = floors_for("p6-b200.48xlarge")
    assert floors.floor(1) == 600.0
    assert "5-nccl-allreduce.sh" in floors.to_json()["single_node"]["floor_source"]


def test_every_floor_message_size_is_one_the_sweep_reaches() -> None:
    for name in CATALOG["allreduce_floors"]["types"]:
        size = floors_for(name).message_bytes
        assert size & (size - 1) == 0 and size >= 8  # a power of two: on the -f 2 sweep from 8 B
