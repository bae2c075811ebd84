"""Region names are checked against botocore's endpoint data, not their shape: `us-east-9` has the shape."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuforge.images.matrix import check_file
from gpuforge.regions import aws_regions, region_problem

MATRICES = Path(__file__).resolve().parents[2] / "images" / "matrices"


def test_botocore_knows_the_regions_gpuforge_ships_for_and_not_made_up_ones() -> None:
    assert {"us-east-1", "us-west-2", "eu-west-1", "cn-north-1", "us-gov-west-1"} <= aws_regions()
    assert region_problem("us-east-1") is None
    for made_up in ("us-east-9", "mars-1", "US-EAST-1", "us-east-1\n"):
        problem = region_problem(made_up)
        assert problem is not None and "is not a region AWS has" in problem and "Fix:" in problem


def test_a_matrix_base_ami_keyed_by_a_region_aws_does_not_have_is_an_error(tmp_path: Path) -> None:
    document = yaml.safe_load((MATRICES / "p5-h100-cuda12.yaml").read_text(encoding="utf-8"))
    ami = next(iter(document["os"]["base_ami"].values()))
    document["os"]["base_ami"] = {"us-east-9": ami}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    found = [f for f in check_file(path).findings if f.rule == "pin.base-ami"]
    assert [f.field for f in found] == ["os.base_ami.us-east-9"]
    assert "'us-east-9' is not a region AWS has" in found[0].message
