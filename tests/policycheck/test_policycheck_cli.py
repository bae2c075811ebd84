"""`gpuforge policy check` through the real CLI entry point, on a plain pulumi-aws program.

The program (tests/fixtures/policycheck/render-farm) is a team's own: its own project
name and config namespace, no gpuforge components, a helper module of its own, and an
AMI that is either a literal id (stack `pinned`) or `get_ami(most_recent=True)` on a
name filter (stack `unpinned`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from catalog_records import record_every_shipped_matrix
from policycheck_support import PINNED_AMI, REGION, RENDER_FARM, REPO

from gpuforge.cli import main
from gpuforge.images.catalog import load_catalog

TOP_KEYS = [
    "project",
    "stack",
    "program",
    "config_file",
    "region",
    "catalog",
    "resources",
    "lookups",
    "policies",
    "not_checked",
]
RESOURCE_KEYS = ["urn", "type", "name", "parent", "inputs"]
VERDICT_KEYS = ["policy", "enforcement", "urn", "message"]
LOOKUP_KEYS = ["function", "call", "ami", "pinned", "reason"]
INSTANCE = "aws:ec2/instance:Instance"
STACKS = REPO / "stacks"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["policy", "check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out, _ = _check(capsys, *args, "--json")
    return code, json.loads(out)


def _mandatory(document: Any) -> list[Any]:
    return [verdict for verdict in document["policies"] if verdict["enforcement"] == "mandatory"]


def _config_file(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "Pulumi.ci.yaml"
    lines = ["config:", f"  aws:region: {REGION}", *(f"  {key}: {value}" for key, value in values.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_most_recent_lookup_is_rejected_by_ami_pinned_naming_the_lookup(
    capsys: pytest.CaptureFixture[str], catalog_file: Path
) -> None:
    code, document = _json(capsys, str(RENDER_FARM), "--stack", "unpinned", "--catalog", str(catalog_file))
    assert code == 1
    assert list(document) == TOP_KEYS
    assert document["not_checked"] == []  # no Kubernetes objects to miss
    assert (document["project"], document["stack"], document["region"]) == ("render-farm", "unpinned", REGION)
    assert document["config_file"] == str(RENDER_FARM / "Pulumi.unpinned.yaml")
    assert document["catalog"] == str(catalog_file)
    (lookup,) = document["lookups"]
    assert list(lookup) == LOOKUP_KEYS
    assert lookup["function"] == "aws:ec2/getAmi:getAmi" and lookup["pinned"] is False
    assert "'gpuforge-p5-h100-cuda12-*' is a wildcard" in lookup["reason"]
    assert lookup["ami"] != PINNED_AMI

    (instance,) = [resource for resource in document["resources"] if resource["type"] == INSTANCE]
    assert list(instance) == RESOURCE_KEYS
    # The program's own helper module named it, and its inputs are the engine's (camelCased).
    assert instance["name"] == "render-unpinned"
    assert instance["inputs"]["ami"] == lookup["ami"]
    assert instance["inputs"]["availabilityZone"] == "us-east-1a"

    (verdict,) = _mandatory(document)
    assert list(verdict) == VERDICT_KEYS
    assert (verdict["policy"], verdict["urn"]) == ("ami-pinned", instance["urn"])
    assert f"AMI {lookup['ami']!r} is not in the image catalog" in verdict["message"]
    assert lookup["call"] in verdict["message"] and "which pins no AMI" in verdict["message"]


def test_the_same_program_with_a_catalogued_ami_passes(
    capsys: pytest.CaptureFixture[str], catalog_file: Path
) -> None:
    code, document = _json(capsys, str(RENDER_FARM), "--stack", "pinned", "--catalog", str(catalog_file))
    assert code == 0
    assert _mandatory(document) == []
    assert document["lookups"] == []
    (instance,) = [resource for resource in document["resources"] if resource["type"] == INSTANCE]
    assert instance["inputs"]["ami"] == PINNED_AMI


def test_the_pinned_id_fails_against_a_catalog_that_lacks_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "catalog"
    empty.mkdir()
    code, document = _json(capsys, str(RENDER_FARM), "--stack", "pinned", "--catalog", str(empty))
    assert code == 1
    assert [verdict["policy"] for verdict in _mandatory(document)] == ["ami-pinned"]
    assert "That id stands for" not in _mandatory(document)[0]["message"]  # no lookup made


def test_a_lookup_on_the_exact_name_of_a_catalogued_ami_is_pinned(
    capsys: pytest.CaptureFixture[str], catalog_file: Path, pinned_ami_name: str, tmp_path: Path
) -> None:
    config = _config_file(tmp_path, amiName=pinned_ami_name)
    code, document = _json(
        capsys, str(RENDER_FARM), "--config-file", str(config), "--catalog", str(catalog_file)
    )
    assert code == 0, document["policies"]
    assert document["stack"] == "ci"  # from the file name, as Pulumi.<stack>.yaml
    (lookup,) = document["lookups"]
    assert lookup["pinned"] is True and lookup["ami"] == PINNED_AMI
    assert _mandatory(document) == []


def test_an_exact_name_no_catalog_entry_has_is_not_pinned(
    capsys: pytest.CaptureFixture[str], catalog_file: Path, tmp_path: Path
) -> None:
    config = _config_file(tmp_path, amiName="ubuntu-jammy-22.04-amd64-server-20240101")
    code, document = _json(
        capsys,
        str(RENDER_FARM),
        "--stack",
        "ci",
        "--config-file",
        str(config),
        "--catalog",
        str(catalog_file),
    )
    assert code == 1
    (lookup,) = document["lookups"]
    assert lookup["pinned"] is False
    assert (
        "no AMI of the image catalog in us-east-1 has name 'ubuntu-jammy-22.04-amd64-server-20240101'"
        in (lookup["reason"])
    )
    assert [verdict["policy"] for verdict in _mandatory(document)] == ["ami-pinned"]


def test_text_view_shows_program_tree_lookups_verdicts_and_result(
    capsys: pytest.CaptureFixture[str], catalog_file: Path
) -> None:
    code, out, err = _check(capsys, str(RENDER_FARM), "--stack", "unpinned", "--catalog", str(catalog_file))
    assert code == 1 and err == ""
    assert "project render-farm, stack unpinned" in out
    assert (
        "  pulumi:pulumi:Stack  render-farm-unpinned\n  └─ aws:ec2/instance:Instance  render-unpinned" in out
    )
    assert (
        "AMI lookups\n  get_ami(most_recent=True, owners=['self'], filters={'name': ['gpuforge-p5-h100-cuda12-*']})"
        in out
    )
    assert "NOT PINNED" in out
    assert "  MANDATORY ami-pinned on aws:ec2/instance:Instance render-unpinned: AMI 'ami-unpinned-" in out
    assert out.rstrip().endswith("Result: FAIL, 1 mandatory policy violation(s)")


def test_the_programs_own_modules_do_not_outlive_the_run(
    capsys: pytest.CaptureFixture[str], catalog_file: Path
) -> None:
    _check(capsys, str(RENDER_FARM), "--stack", "pinned", "--catalog", str(catalog_file))
    assert "naming" not in sys.modules
    assert str(RENDER_FARM) not in sys.path
    assert Path.cwd() != RENDER_FARM


def test_an_ami_catalogued_in_another_region_is_refused(
    capsys: pytest.CaptureFixture[str], catalog_file: Path, tmp_path: Path
) -> None:
    """An AMI id belongs to one region: the catalog records PINNED_AMI in us-east-1 only."""
    config = tmp_path / "Pulumi.ireland.yaml"
    config.write_text(f"config:\n  aws:region: eu-west-1\n  amiId: {PINNED_AMI}\n", encoding="utf-8")
    code, document = _json(
        capsys, str(RENDER_FARM), "--config-file", str(config), "--catalog", str(catalog_file)
    )
    assert code == 1
    (verdict,) = _mandatory(document)
    assert verdict["policy"] == "ami-pinned"
    assert f"AMI {PINNED_AMI!r} is catalogued in {REGION} only" in verdict["message"]
    assert "this node launches in eu-west-1" in verdict["message"]


@pytest.mark.parametrize("region", ["eu-mars-1", "us-east-1 ", "US-EAST-1"])
def test_a_region_aws_does_not_have_is_bad_input(
    capsys: pytest.CaptureFixture[str], catalog_file: Path, tmp_path: Path, region: str
) -> None:
    config = tmp_path / "Pulumi.nowhere.yaml"
    config.write_text(f"config:\n  aws:region: '{region}'\n  amiId: {PINNED_AMI}\n", encoding="utf-8")
    code, out, err = _check(
        capsys, str(RENDER_FARM), "--config-file", str(config), "--catalog", str(catalog_file)
    )
    assert code == 2 and out == ""
    assert f"{config}: aws:region = {region!r} is not a region AWS has" in err
    assert "eu-west-1" in err and "Fix:" in err


def test_catalog_reaches_a_gpuforge_stack_program_as_it_does_for_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The stack program resolves its AMI from `gpuforge:catalog`; --catalog sets it, as `gpuforge plan` does."""
    catalog = record_every_shipped_matrix(tmp_path / "catalog.json")
    code, document = _json(capsys, str(STACKS / "training"), "--stack", "dev", "--catalog", str(catalog))
    assert code == 0, document
    assert document["catalog"] == str(catalog)
    amis = [r["inputs"]["imageId"] for r in document["resources"] if r["type"] == LAUNCH_TEMPLATE]
    recorded = {entry.ami_id for entry in load_catalog(catalog).entries}
    assert amis and set(amis) <= recorded


def test_a_catalog_that_does_not_exist_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A mistyped --catalog must not read as an empty catalog (every AMI unpinned, exit 1)."""
    missing = tmp_path / "catalgo.json"
    code, out, err = _check(capsys, str(RENDER_FARM), "--stack", "pinned", "--catalog", str(missing))
    assert code == 2 and out == ""
    assert f"{missing}: no such AMI catalog (given by --catalog)" in err and "Fix:" in err
