"""A preempted QOS's grace period beside the checkpoint advice, as `gpuforge plan` shows it.

The stacks are the shipped p5-prod (research preempted by production, gracePeriod 300, a 1043 GiB checkpoint
on its PERSISTENT_2 Lustre) and copies of it with one key changed; the write time and interval compared against
are the checkpoint advisor's own for that stack, so the test checks the grace against them, not a number.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import yaml

from gpuforge.checkpoint import stack_advice
from gpuforge.checkpoint.advice import duration
from gpuforge.checkpoint.grace import grace_advice
from gpuforge.plan.render import grace_lines, team_lines
from gpuforge.stack_config import StackConfig, load_stack_config

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks/training"


def _p5_prod(
    tmp_path: Path, research: dict[str, object] | None = None, checkpoint: bool = True
) -> StackConfig:
    """p5-prod, with research's QOS entry updated by `research` (a None value removes the key)."""
    folder = tmp_path / "training"
    shutil.copytree(STACKS, folder, ignore=shutil.ignore_patterns("Pulumi.*.yaml"))
    document = yaml.safe_load((STACKS / "Pulumi.p5-prod.yaml").read_text(encoding="utf-8"))
    config = document["config"]
    config["gpuforge:matrix"] = str(REPO / "images/matrices/p5-h100-cuda12.yaml")
    if not checkpoint:
        del config["gpuforge:checkpoint"]
    for level in config["gpuforge:scheduler"]["qos"]:
        if level["name"] == "research":
            for key, value in (research or {}).items():
                if value is None:
                    level.pop(key, None)
                else:
                    level[key] = value
    (folder / "Pulumi.p5-prod.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return load_stack_config(folder, "p5-prod")


def test_a_checkpoint_that_fits_the_grace_loses_at_most_the_grace(tmp_path: Path) -> None:
    config = load_stack_config(STACKS, "p5-prod")
    advice = stack_advice(config)
    assert advice is not None
    (entry,) = grace_advice(config.scheduler.qos, advice)
    assert (entry.qos, entry.preempted_by, entry.grace_seconds) == ("research", ("production",), 300)
    assert advice.write_seconds <= 300 and entry.saves_in_grace is True and entry.warning() is None
    (line,) = grace_lines(config)
    assert line.split(None, 1)[0] == "preemption"
    assert "research (preempted by production): SIGTERM, then 300 s before the requeue" in line
    assert f"writes in {advice.write_seconds:.0f} s" in line and "loses at most the grace" in line
    assert f"not up to its {duration(advice.daly_seconds)} checkpoint interval" in line
    assert "300 s grace when preempted" in team_lines(config)[1]
    assert entry.to_json() == {
        "qos": "research",
        "preempted_by": ["production"],
        "grace_seconds": 300,
        "checkpoint_write_seconds": round(advice.write_seconds, 1),
        "checkpoint_interval_seconds": round(advice.daly_seconds),
        "saves_in_grace": True,
    }


def test_a_grace_shorter_than_the_write_is_advice_with_the_seconds_needed(tmp_path: Path) -> None:
    config = _p5_prod(tmp_path, {"gracePeriod": 60})
    advice = stack_advice(config)
    assert advice is not None and advice.write_seconds > 60
    (entry,) = grace_advice(config.scheduler.qos, advice)
    assert entry.saves_in_grace is False
    line, advice_line = grace_lines(config)
    assert f"loses up to its {duration(advice.daly_seconds)} checkpoint interval" in line
    assert advice_line.split(None, 1)[0] == "advice"
    assert (
        f"gracePeriod (60 s) is shorter than writing the 1043 GiB checkpoint ({advice.write_seconds:.0f} s"
        in advice_line
    )
    assert f"Fix: set gracePeriod to at least {math.ceil(advice.write_seconds)}" in advice_line


@pytest.mark.parametrize(
    ("research", "checkpoint", "words"),
    [
        ({"gracePeriod": None}, True, "requeued at once, no SIGTERM first (no gracePeriod)"),
        (
            {},
            False,
            "SIGTERM, then 300 s before the requeue; set gpuforge:checkpoint to see whether a checkpoint fits it",
        ),
    ],
)
def test_no_grace_or_no_checkpoint_is_said(
    tmp_path: Path, research: dict[str, object], checkpoint: bool, words: str
) -> None:
    config = _p5_prod(tmp_path, research, checkpoint=checkpoint)
    (line,) = grace_lines(config)
    assert words in line, line


def test_a_stack_where_nothing_is_preempted_has_no_preemption_line(tmp_path: Path) -> None:
    config = load_stack_config(STACKS, "dev")
    assert not any(level.preempts for level in config.scheduler.qos)
    assert grace_lines(config) == [] and grace_advice(config.scheduler.qos, None) == []
