"""`gpuforge plan` with `gpuforge:checkpoint`: the summary's checkpoint line, its JSON, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_support import STACK_DIR, StackCopy

from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.plan.render import render_text
from gpuforge.plan.stack_plan import plan
from gpuforge.stack_config import load_stack_config

# Llama 3's published figure per node (gpuforge/data/failure_rates.yaml): 2048 x 54 x 24 / 419 hours.
NODE_MTBF_S = 2048 * 54 * 24 / 419 * 3600


def test_p5_prod_plans_a_checkpoint_interval(catalog_path: Path) -> None:
    """1043 GiB at 24000 GiB x 250 MB/s/TiB = 6000 MB/s, on 16 nodes: Young sqrt(2 delta M), M = node MTBF / 16."""
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    delta = 1043 * 2**30 / 6000e6
    job_mtbf = NODE_MTBF_S / 16
    young = (2 * delta * job_mtbf) ** 0.5
    text = render_text(result).splitlines()
    at = text.index(next(line for line in text if line.startswith("  checkpoint ")))
    assert text[at].startswith(
        f"  checkpoint every {young / 3600:.1f} h (Daly; Young {young / 3600:.1f} h), ~"
    )
    assert text[at + 1] == (
        f"             write 1043 GiB in {delta:.0f} s: the Lustre baseline 6000 MB/s (24000 GiB x 250 MB/s/TiB)"
    )
    assert text[at + 2].startswith(
        f"             job MTBF {job_mtbf / 3600:.1f} h on 16 node(s), 6334.6 h per node: "
    )
    assert "419 unexpected interruptions in 54 days" in text[at + 2]
    assert not text[at + 3].startswith("             ")  # no warning line


def test_plan_json_carries_the_checkpoint(capsys: pytest.CaptureFixture[str], catalog_path: Path) -> None:
    code = main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    checkpoint = document["checkpoint"]
    assert checkpoint["size_gib"] == 1043 and checkpoint["nodes"] == 16
    assert checkpoint["young_seconds"] == round((2 * 1043 * 2**30 / 6000e6 * NODE_MTBF_S / 16) ** 0.5)
    assert 0 < checkpoint["lost_fraction"] < 0.1 and checkpoint["warning"] is None


def test_no_checkpoint_key_no_line(stack_copy: StackCopy, catalog_path: Path) -> None:
    result = plan(stack_copy(overrides={"gpuforge:checkpoint": None}), "p5-prod", catalog=catalog_path)
    assert "  checkpoint " not in render_text(result)


def test_a_large_loss_is_a_warning_in_the_summary(stack_copy: StackCopy, catalog_path: Path) -> None:
    """A measured 20-hour write on 16 nodes (job MTBF ~396 h) loses well over 10 %: planned, with a warning."""
    folder = stack_copy(overrides={"gpuforge:checkpoint": {"sizeGiB": 1043, "writeSeconds": 72000}})
    text = render_text(plan(folder, "p5-prod", catalog=catalog_path))
    assert "             write 1043 GiB in 72000 s: measured (writeSeconds)" in text
    assert (
        "             WARNING: gpuforge:checkpoint: " in text and "Fix: make the checkpoint smaller" in text
    )


def test_a_write_beyond_the_mtbf_is_refused_with_exit_2(
    stack_copy: StackCopy, catalog_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half the job's MTBF or more (~198 h on 16 nodes): Young's interval would exceed the MTBF."""
    folder = stack_copy(
        overrides={"gpuforge:checkpoint": {"sizeGiB": 1043, "writeSeconds": NODE_MTBF_S / 32}}
    )
    code = main(["plan", str(folder), "--stack", "p5-prod", "--catalog", str(catalog_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "Pulumi.p5-prod.yaml" in err and "gpuforge:checkpoint: writing 1043 GiB takes" in err
    assert "would exceed the MTBF" in err and "Fix: make the checkpoint smaller" in err


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"writeSeconds": 95}, "gpuforge:checkpoint.sizeGiB: required key is missing"),
        ({"sizeGiB": 0}, "gpuforge:checkpoint.sizeGiB = "),
        ({"sizeGiB": "1043"}, "gpuforge:checkpoint.sizeGiB = "),
        ({"sizeGiB": 1043, "writeSeconds": -1}, "gpuforge:checkpoint.writeSeconds = "),
        ({"sizeGiB": 1043, "size": 1}, "gpuforge:checkpoint.size: unknown key"),
    ],
)
def test_bad_checkpoint_keys_name_the_field(stack_copy: StackCopy, value: object, expected: str) -> None:
    folder = stack_copy(overrides={"gpuforge:checkpoint": value})
    with pytest.raises(InputError) as raised:
        load_stack_config(folder, "p5-prod")
    assert expected in raised.value.message


def test_no_lustre_and_no_write_seconds_is_refused(stack_copy: StackCopy) -> None:
    folder = stack_copy(overrides={"gpuforge:lustre": None})
    with pytest.raises(InputError) as raised:
        load_stack_config(folder, "p5-prod")
    assert "gpuforge:checkpoint.sizeGiB = 1043: the stack has no gpuforge:lustre" in raised.value.message
    assert "Fix: set gpuforge:checkpoint.writeSeconds" in raised.value.message
