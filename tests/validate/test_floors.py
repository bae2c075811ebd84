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
