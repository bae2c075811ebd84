"""Names a scheduler reserves or already uses, refused where a stack's scheduler block is read
(gpuforge.scheduler.reserved through SchedulerSpec), each only for the scheduler that makes the name.

Stacks are read as `plan` and the render commands read them (load_stack_config), so every refusal names the
file, the gpuforge:scheduler key, the value, the rule with its source, and the fix.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stack_files import slurm_stack, write_stack

from gpuforge.components.specs import QosSpec, TeamSpec
from gpuforge.errors import InputError
from gpuforge.kubernetes import apply
from gpuforge.kubernetes.manifests import objects_of, render_addons, stack_addons
from gpuforge.scheduler import reserved
from gpuforge.scheduler.accounts import AccountsState, parse_state
from gpuforge.stack_config import StackConfig, load_stack_config

KUBERNETES = {
    "type": "kubernetes",
    "kubernetesVersion": "1.35",  # the shipped H100 matrix's kubernetes.version
    "systemNodeType": "m7i.xlarge",
    "adminRoleArn": "arn:aws:iam::123456789012:role/platform-admin",
    "qos": [{"name": "production", "priority": 1000}],
    "teams": [{"name": "llm", "users": ["alice"], "gpuQuota": 8, "qos": ["production"]}],
}
SLURM = {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"}


def _load(tmp_path: Path, block: dict[str, Any]) -> StackConfig:
    folder = write_stack(tmp_path / "stack", "dev", slurm_stack(**{"gpuforge:scheduler": block}))
    return load_stack_config(folder, "dev")


def _refused(tmp_path: Path, block: dict[str, Any]) -> str:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, block)
    message = caught.value.message
    assert caught.value.exit_code == 2
    assert "Pulumi.dev.yaml" in message and "Fix:" in message and "(source: " in message, message
    return message


def _team(name: str) -> dict[str, Any]:
    return {"name": name, "users": ["alice"], "gpuQuota": 8}


@pytest.mark.parametrize(
    ("team", "rule", "source"),
    [
        ("kube-system", "one of the namespaces every cluster starts with", reserved.NAMESPACES_DOC),
        ("default", "one of the namespaces every cluster starts with", reserved.NAMESPACES_DOC),
        ("kube-public", "one of the namespaces every cluster starts with", reserved.NAMESPACES_DOC),
        ("kube-node-lease", "one of the namespaces every cluster starts with", reserved.NAMESPACES_DOC),
        ("kueue-system", "the namespace of Kueue's controller", reserved.KUEUE_DEFAULTS),
        ("kube-llm", "under the prefix 'kube-'", reserved.NAMESPACES_DOC),
        ("ml_team", "not a namespace name (rule: an RFC 1123 label", reserved.NAMES_DOC),
        ("llm-", "not a namespace name (rule: an RFC 1123 label", reserved.NAMES_DOC),
        ("a" * 64, "not a namespace name (rule: an RFC 1123 label", reserved.NAMES_DOC),
    ],
)
def test_a_team_kubernetes_has_a_namespace_for_is_refused_on_kubernetes_only(
    tmp_path: Path, team: str, rule: str, source: str
) -> None:
    block = {**KUBERNETES, "teams": [_team(team)], "qos": []}
    message = _refused(tmp_path, block)
    assert f"gpuforge:scheduler.teams[{team}].name = '{team}'" in message, message
    assert rule in message and source in message, message
    # A Slurm stack's teams are Slurm accounts only: the same name is a good one there.
    assert _load(tmp_path, {**SLURM, "teams": [_team(team)]}).scheduler.teams[0].name == team


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical", "system-high"])
def test_a_qos_under_the_system_prefix_is_refused_on_kubernetes_only(tmp_path: Path, name: str) -> None:
    qos = [{"name": name, "priority": 1000}]
    message = _refused(tmp_path, {**KUBERNETES, "qos": qos, "teams": []})
    assert f"gpuforge:scheduler.qos[{name}].name = '{name}'" in message
    assert "under the prefix 'system-'" in message and reserved.PRIORITY_DOC in message, message
    assert _load(tmp_path, {**SLURM, "qos": qos}).scheduler.qos[0].name == name


def test_slurm_s_own_normal_qos_is_refused_on_slurm_only(tmp_path: Path) -> None:
    """slurmdbd's QOS normal (the real capture's first line), which sync-accounts would refuse to take over."""
    captured = (Path(__file__).resolve().parents[1] / "fixtures" / "accounts-sync" / "qos.txt").read_text(
        "utf-8"
    )
    assert captured.splitlines()[0].startswith("normal|") and "Normal QOS default" in captured
    qos = [{"name": "normal", "priority": 10}]
    message = _refused(tmp_path, {**SLURM, "qos": qos})
    assert "gpuforge:scheduler.qos[normal].name = 'normal'" in message
    assert "slurmdbd makes QOS normal in every database" in message and "rename the QOS" in message, message
    kubernetes = _load(tmp_path, {**KUBERNETES, "qos": qos, "teams": [dict(_team("llm"), qos=["normal"])]})
    assert kubernetes.scheduler.qos[0].name == "normal"


def test_slurm_s_own_root_user_in_a_team_is_refused_on_slurm_only(tmp_path: Path) -> None:
    """slurmdbd's user root (DefaultAccount root in the real capture), whose default account a sync would move."""
    captured = (Path(__file__).resolve().parents[1] / "fixtures" / "accounts-sync" / "users.txt").read_text(
        "utf-8"
    )
    assert "root|root" in captured.splitlines()
    teams = [{"name": "llm", "users": ["alice", "root"], "gpuQuota": 8}]
    message = _refused(tmp_path, {**SLURM, "teams": teams})
    assert "gpuforge:scheduler.teams[llm].users = 'root'" in message
    assert "move the Slurm administrator's default account" in message and "leave root out" in message, (
        message
    )
    assert [
        user.name for user in _load(tmp_path, {**KUBERNETES, "teams": teams}).scheduler.teams[0].users
    ] == [
        "alice",
        "root",
    ]


def test_an_accounts_file_naming_slurm_s_normal_qos_is_refused() -> None:
    """The controller's own reading of gpuforge-accounts.json applies the same rule (a hand-edited file)."""
    document = AccountsState(cluster="gfcapture").to_json() | {
        "qos": [{"name": "normal", "priority": 10, "preempt": []}]
    }
    with pytest.raises(InputError) as caught:
        parse_state(json.dumps(document), "gpuforge-accounts.json")
    assert "qos.name = 'normal'" in caught.value.message
    assert "slurmdbd makes QOS normal" in caught.value.message
    document = AccountsState(cluster="gfcapture").to_json() | {
        "accounts": [{"name": "llm", "gpu_quota": 8, "qos": []}],
        "users": [{"name": "root", "accounts": ["llm"], "default_account": "llm"}],
    }
    with pytest.raises(InputError, match=r"users.name = 'root': slurmdbd makes user root"):
        parse_state(json.dumps(document), "gpuforge-accounts.json")


@pytest.mark.parametrize(
    "instance_type", ["p5.48xlarge", "g6.xlarge", "g4dn.xlarge", "trn1.2xlarge", "inf2.xlarge"]
)
def test_an_accelerated_system_node_type_is_refused(tmp_path: Path, instance_type: str) -> None:
    message = _refused(tmp_path, {**KUBERNETES, "systemNodeType": instance_type})
    assert f"gpuforge:scheduler.systemNodeType = '{instance_type}'" in message
    assert "paid for and unused" in message and "give a CPU type, e.g. m7i.xlarge" in message, message


def test_the_accelerated_series_are_those_aws_reports_accelerators_for() -> None:
    """Checked against AWS's DescribeInstanceTypes output as moto ships it (every type AWS lists)."""
    import moto

    data = json.loads(
        gzip.decompress(
            (Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz").read_bytes()
        )
    )
    accelerators = ("GpuInfo", "NeuronInfo", "InferenceAcceleratorInfo", "FpgaInfo", "MediaAcceleratorInfo")
    reports = {name for name, row in data.items() if any(key in row for key in accelerators)}
    refused = {name for name in data if reserved.accelerated(name)}
    assert len(data) > 1000 and len(reports) > 50
    assert reports <= refused
    # The one refused type that reports no accelerator: Trainium2 UltraServer nodes, listed without NeuronInfo.
    assert {re.sub(r"\..*", "", name) for name in refused - reports} == {"trn2u"}


def test_the_names_in_use_come_from_the_render(tmp_path: Path) -> None:
    """Every namespace the render puts an add-on object in, and Kueue's, is refused as a team's namespace."""
    config = _load(tmp_path, KUBERNETES)
    teams = {team.name for team in config.scheduler.teams}
    used = {
        obj["metadata"]["namespace"]
        for obj in objects_of(stack_addons(config))
        if obj["metadata"].get("namespace") and obj["metadata"]["namespace"] not in teams
    }
    assert used and used | {apply.KUEUE_NAMESPACE} <= set(reserved.addon_namespaces())
    for name in used | {apply.KUEUE_NAMESPACE}:
        assert reserved.namespace_problem("teams.name", name) is not None


def test_render_addons_refuses_the_same_names_for_a_caller_that_builds_no_spec(tmp_path: Path) -> None:
    config = _load(tmp_path, KUBERNETES)
    group_files = stack_addons(config)
    assert "namespace/llm.yaml" in group_files
    team = TeamSpec.model_construct(name="kube-system", users=(), gpu_quota=8, qos=())
    level = QosSpec.model_construct(name="system-high", priority=5, preempts=())
    from gpuforge import hardware
    from gpuforge.kubernetes.kueue import GpuNodeGroup

    group = GpuNodeGroup("dev-gpu", hardware.get("p5.48xlarge"), 2)
    with pytest.raises(InputError) as caught:
        render_addons("dev", [group], [team], [level])
    assert "2 names the scheduler cannot take" in caught.value.message
    assert (
        "teams[kube-system].name" in caught.value.message and "qos[system-high].name" in caught.value.message
    )


def test_every_problem_is_said_at_once(tmp_path: Path) -> None:
    block = {
        **KUBERNETES,
        "systemNodeType": "p5.48xlarge",
        "qos": [{"name": "system-high", "priority": 10}],
        "teams": [_team("default"), dict(_team("kueue-system"), users=["bob"])],
    }
    message = _refused(tmp_path, block)
    assert "4 names the scheduler cannot take" in message
    for key in ("teams[default]", "teams[kueue-system]", "qos[system-high]", "systemNodeType"):
        assert f"gpuforge:scheduler.{key}" in message, message
