"""`gpuforge:scheduler.qos[].gracePeriod`: read as written, rendered as the QOS's GraceTime, and every refusal.

Read the way `plan` and `scheduler render` read a stack (load_stack_config), so each refusal names the file,
the key as written, the value, the rule and the fix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stack_files import slurm_stack, write_stack

from gpuforge.components.specs import GRACE_PERIOD_RANGE_S, SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.scheduler.render import ACCOUNTS_FILE, render_files
from gpuforge.scheduler.stack import stack_cluster
from gpuforge.stack_config import load_stack_config

TEAMS = [{"name": "llm", "users": ["alice"], "gpuQuota": 8, "qos": ["production", "research"]}]


def _qos(
    research: dict[str, Any] | None = None, production: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    return [
        {"name": "production", "priority": 1000, "preempts": ["research"], **(production or {})},
        {"name": "research", "priority": 100, **(research or {})},
    ]


def _folder(tmp_path: Path, qos: list[dict[str, Any]]) -> Path:
    scheduler = {"type": "slurm", "controllerInstanceType": "m7i.2xlarge", "qos": qos, "teams": TEAMS}
    return write_stack(tmp_path / "stack", "dev", slurm_stack(**{"gpuforge:scheduler": scheduler}))


def _load(tmp_path: Path, qos: list[dict[str, Any]]) -> SchedulerSpec:
    return load_stack_config(_folder(tmp_path, qos), "dev").scheduler


def test_a_grace_period_is_read_and_rendered_as_the_qos_gracetime(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _qos(research={"gracePeriod": 300}))
    config = load_stack_config(folder, "dev")
    assert [(level.name, level.grace_period) for level in config.scheduler.qos] == [
        ("production", None),
        ("research", 300),
    ]
    text = render_files(stack_cluster(config))[ACCOUNTS_FILE]
    qos = {level["name"]: level for level in json.loads(text)["qos"]}
    assert (qos["research"]["grace_time"], qos["production"]["grace_time"]) == (300, 0)


@pytest.mark.parametrize("value", [0, GRACE_PERIOD_RANGE_S[1] + 1, -5])
def test_a_grace_period_out_of_range_is_refused(tmp_path: Path, value: int) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, _qos(research={"gracePeriod": value}))
    message = caught.value.message
    assert (
        "Pulumi.dev.yaml" in message and f"gpuforge:scheduler.qos[research].gracePeriod = {value}" in message
    )
    assert "whole seconds from 1 to 3600" in message and "Fix:" in message, message


@pytest.mark.parametrize("value", ["300", 5.5, True, "5m"])
def test_a_grace_period_that_is_not_whole_seconds_is_refused(tmp_path: Path, value: object) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, _qos(research={"gracePeriod": value}))
    message = caught.value.message
    assert "Pulumi.dev.yaml" in message and f"gpuforge:scheduler.qos.1.gracePeriod = {value!r}" in message
    assert "a grace period is whole seconds, written as a number (e.g. 300" in message, message


def test_a_grace_period_on_a_qos_nothing_preempts_is_refused(tmp_path: Path) -> None:
    """On the preempting QOS it would never apply: a misplaced key, said where it is, with where it belongs."""
    with pytest.raises(InputError) as caught:
        _load(tmp_path, _qos(production={"gracePeriod": 300}))
    message = caught.value.message
    assert "gpuforge:scheduler.qos[production].gracePeriod = 300" in message
    assert "no QOS preempts production" in message and "put gracePeriod on the QOS named in" in message, (
        message
    )
