"""kubernetes-grace-period (advisory): a team pod's terminationGracePeriodSeconds against its QOS's gracePeriod.

Run both ways, as the other Kubernetes rules are: through the policy pack's offline runner with the policy's
`gracePeriods` config (pulumi-kubernetes resources, type `kubernetes:<group/version>:<Kind>`), and through
`gpuforge policy kubernetes --stack-dir --stack` on YAML files, whose grace periods come from the shipped p5-eks
stack (research: gracePeriod 300).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_helpers import of
from test_policies_kubernetes import job, type_token, wrap

from gpuforge.cli import main
from gpuforge.kubernetes.check import check_object
from gpuforge.policies.rules_kubernetes_grace import GRACE_PERIODS_KEY, NAME, grace_periods
from gpuforge.policies.runner import run_policies
from gpuforge.pulumi_mocks import RecordedResource
from gpuforge.stack_config import load_stack_config

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks/training"
PERIODS = {"research": 300}
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"


def team_job(qos: str | None, grace: object = None, kind: str = "Job") -> dict[str, Any]:
    """A GPU Job every other rule passes, queued to team vision's LocalQueue at QOS `qos`."""
    obj = job(kind=kind)
    labels = {QUEUE: "vision", **({PRIORITY: qos} if qos else {})}
    obj["metadata"]["labels"] = labels
    if grace is not None:
        obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return obj


def _pack(obj: dict[str, Any], periods: dict[str, int]) -> list[str]:
    token = type_token(obj)
    resource = RecordedResource(
        type=token,
        name="train",
        inputs=obj,
        outputs=obj,
        id="",
        urn=f"urn:pulumi:test::gpuforge::{token}::train",
        parent_urn=None,
        custom=True,
    )
    verdicts = run_policies([resource], {NAME: {GRACE_PERIODS_KEY: periods}})
    found = of(verdicts, NAME)
    assert all(verdict.enforcement == "advisory" for verdict in found)
    return [verdict.message for verdict in found]


def both(obj: dict[str, Any], periods: dict[str, int] = PERIODS) -> list[str]:
    """The rule's messages on `obj`, the pack's and the offline check's being the same."""
    offline = [
        finding for finding in check_object(obj, "test", grace_periods=periods) if finding.policy == NAME
    ]
    assert not any(finding.mandatory for finding in offline)
    messages = _pack(obj, periods)
    assert messages == [finding.message for finding in offline]
    return messages


def test_the_stack_s_grace_periods_are_the_policy_s_config() -> None:
    assert grace_periods(load_stack_config(STACKS, "p5-eks").scheduler.qos) == {"research": 300}


def test_a_research_pod_with_kubernetes_default_grace_is_told_the_seconds_it_needs() -> None:
    (message,) = both(team_job("research"))
    assert message.startswith(
        "spec.template.spec.terminationGracePeriodSeconds is unset (Kubernetes' default, 30 s)"
    )
    assert "below QOS research's gracePeriod of 300 s" in message
    assert "Fix: set spec.template.spec.terminationGracePeriodSeconds: 300" in message


@pytest.mark.parametrize(
    ("qos", "grace", "found"),
    [
        ("research", 120, 1),
        ("research", 300, 0),
        ("research", 900, 0),
        ("production", None, 0),  # production is never preempted: no gracePeriod to hold it to
        (None, None, 0),  # names no QOS
    ],
)
def test_only_a_pod_below_its_qos_grace_is_advised(qos: str | None, grace: int | None, found: int) -> None:
    assert len(both(team_job(qos, grace))) == found


def test_without_the_stack_s_grace_periods_nothing_is_said() -> None:
    assert both(team_job("research"), periods={}) == []


def test_the_pod_s_priority_class_names_the_qos_when_the_label_does_not() -> None:
    pod = wrap("Pod", {**job()["spec"]["template"]["spec"], "priorityClassName": "research"})
    pod["metadata"]["labels"] = {QUEUE: "vision"}
    (message,) = both(pod)
    assert message.startswith("spec.terminationGracePeriodSeconds is unset"), message


def test_each_item_of_a_list_is_judged_by_its_own_label() -> None:
    short, enough = team_job("research", 60), team_job("research", 300)
    listed = {"apiVersion": "v1", "kind": "List", "items": [enough, short]}
    (message,) = both(listed)
    assert message.startswith("items[1].spec.template.spec.terminationGracePeriodSeconds is 60 s"), message


def test_an_appwrapper_component_takes_the_appwrapper_s_label() -> None:
    wrapper = wrap("AppWrapper", job()["spec"]["template"]["spec"])
    wrapper["metadata"]["labels"] = {QUEUE: "vision", PRIORITY: "research"}
    (message,) = both(wrapper)
    assert "components[0].template.spec.template.spec.terminationGracePeriodSeconds is unset" in message, (
        message
    )


def test_gpuforge_policy_kubernetes_reads_the_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump(team_job("research")), encoding="utf-8")
    args = ["policy", "kubernetes", str(manifest)]
    assert main([*args, "--stack-dir", str(STACKS), "--stack", "p5-eks"]) == 0  # advisory: the pod runs
    out = capsys.readouterr().out
    assert f"{NAME} (advisory): spec.template.spec.terminationGracePeriodSeconds is unset" in out, out
    assert "0 mandatory, 1 advisory finding(s)" in out
    assert main(args) == 0 and NAME not in capsys.readouterr().out
    fixed = copy.deepcopy(team_job("research", 300))
    manifest.write_text(yaml.safe_dump(fixed), encoding="utf-8")
    assert main([*args, "--stack-dir", str(STACKS), "--stack", "p5-eks"]) == 0
    assert "0 mandatory, 0 advisory finding(s)" in capsys.readouterr().out


def test_one_of_stack_dir_and_stack_alone_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump(team_job("research")), encoding="utf-8")
    assert main(["policy", "kubernetes", str(manifest), "--stack", "p5-eks"]) == 2
    assert "--stack-dir and --stack name one stack together" in capsys.readouterr().err
