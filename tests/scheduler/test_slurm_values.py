"""Every value that reaches a Slurm file or scontrol is checked whole, by one rule, wherever it enters.

The rules live in gpuforge/scheduler/slurm_values.py; these tests prove each entry point
uses them: the stack config (stack name, partitions, zone, reservation, controller type),
the renderer (every field of SlurmCluster and SlurmSite, switch names), the matrix's
Slurm version, and the node agent's --node-name. What real Slurm makes of what passes is
tested in test_slurm_hostile.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_files import MATRIX, slurm_stack, write_stack

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.components.specs import PartitionSpec, SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.node.runner import CommandResult
from gpuforge.node.slurm import SlurmAgent, drain_argv
from gpuforge.scheduler import slurm_values, versions
from gpuforge.scheduler.render import SlurmCluster, SlurmSite, render_files, topology_argument
from gpuforge.scheduler.sync import sync_topology
from gpuforge.scheduler.topology import NetworkTopology
from gpuforge.stack_config import load_stack_config

REPO = Path(__file__).resolve().parents[2]
SITE = SlurmSite(controller_host="t-slurmctld", controller_addr="10.0.0.10")
SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")

# One valid value per rule; each must stay valid, and be refused with a newline after it
# or with a non-ASCII digit in it.
VALID = [
    (slurm_values.NODE_NAME, "i-0123456789abcdef0"),
    (slurm_values.SWITCH_NAME, "nn-0123456789abcdef0"),
    (slurm_values.PARTITION_NAME, "gpu1"),
    (slurm_values.CLUSTER_NAME, "p5-prod1"),
    (slurm_values.FEATURE, "p5.48xlarge"),
    (slurm_values.GRES_TYPE, "h100"),
    (slurm_values.MAX_TIME, "2-00:00:00"),
    (slurm_values.SLURM_VERSION, "26.05.5"),
    (slurm_values.AVAILABILITY_ZONE, "us-east-1a"),
    (slurm_values.RESERVATION_ID, "cr-0123456789abcdef0"),
    (slurm_values.INSTANCE_ID, "i-0123456789abcdef0"),
    (slurm_values.INSTANCE_TYPE, "m7i.2xlarge"),
    (slurm_values.HOST_NAME, "p5-slurmctld1"),
    (slurm_values.USER_NAME, "slurm"),
    (slurm_values.PATH, "/var/spool/slurmd/%n"),
]


def _unicode_digit(value: str) -> str:
    """`value` with its first ASCII digit written in Arabic-Indic digits (same number, not ASCII)."""
    index = next((i for i, char in enumerate(value) if char.isascii() and char.isdigit()), None)
    if index is None:
        return value + "\u0661"
    return value[:index] + chr(0x0660 + int(value[index])) + value[index + 1 :]


@pytest.mark.parametrize(("rule", "value"), VALID, ids=[rule.what for rule, _ in VALID])
def test_each_rule_takes_the_whole_value_in_ascii(rule: slurm_values.Rule, value: str) -> None:
    assert rule.ok(value)
    for hostile in (value + "\n", value + " x", "#" + value, value + "=1", _unicode_digit(value)):
        assert not rule.ok(hostile), hostile
    assert not rule.ok(None)


def test_an_error_names_field_rule_fix_and_source_and_cuts_the_value_short() -> None:
    with pytest.raises(InputError) as caught:
        slurm_values.SWITCH_NAME.check("x" * 5000 + "\nSwitchName=evil", field="NetworkNodes[0]")
    message = caught.value.message
    assert message.startswith("NetworkNodes[0] = 'xxx")
    assert "(5016 characters)" in message and "evil" not in message and "\n" not in message
    assert "64 characters" in message and "Fix:" in message and "topology.conf.html" in message


@pytest.mark.parametrize("word", ["ALL", "all", "DEFAULT", "gpunodes"])
def test_words_scontrol_reads_as_many_nodes_are_no_node_name(word: str) -> None:
    assert not slurm_values.NODE_NAME.ok(word)


def test_an_instance_type_must_be_one_aws_lists_not_only_shaped_like_one() -> None:
    assert slurm_values.INSTANCE_TYPE.ok("p6-b300.48xlarge")
    assert "AWS lists no such instance type" in (slurm_values.INSTANCE_TYPE.problem("m7i.99xlarge") or "")


# --- the stack config: one rule for plan and render ---


def _stack(tmp_path: Path, stack: str = "test", **changes: Any) -> Path:
    return write_stack(tmp_path, stack, slurm_stack(**changes))


def test_render_refuses_a_stack_name_plan_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_dir = _stack(tmp_path, "My Stack")
    out = tmp_path / "out"
    assert main(["scheduler", "render", str(stack_dir), "--stack", "My Stack", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "'My Stack'" in error and "cluster name" in error and "Fix:" in error
    assert not out.exists()
    with pytest.raises(InputError, match="cluster name"):
        load_stack_config(stack_dir, "My Stack")


@pytest.mark.parametrize("command", ["scheduler render", "plan"])
def test_a_stack_name_no_file_system_takes_is_refused_not_a_traceback(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = "x" * 300
    argv = [*command.split(), str(_stack(tmp_path)), "--stack", stack]
    assert main([*argv, "--out", str(tmp_path / "out")] if command.startswith("scheduler") else argv) == 2
    error = capsys.readouterr().err
    assert "cluster name" in error and "(300 characters)" in error and "Traceback" not in error


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"aws:region": "us-east-1\n"}, "aws:region"),
        ({"gpuforge:availabilityZone": "us-east-1a\n"}, "availabilityZone"),
        (
            {"gpuforge:capacity": {"type": "reservation", "reservationId": "cr-0123456789abcdef0\n"}},
            "reservation",
        ),
        (
            {"gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m7i.99xlarge"}},
            "controllerInstanceType",
        ),
        (
            {
                "gpuforge:scheduler": {
                    "type": "slurm",
                    "controllerInstanceType": "m7i.2xlarge",
                    "partitions": [{"name": "gpu", "maxTime": "30\n"}],
                }
            },
            "maxTime",
        ),
        (
            {
                "gpuforge:scheduler": {
                    "type": "slurm",
                    "controllerInstanceType": "m7i.2xlarge",
                    "partitions": [{"name": "gpu\n", "maxTime": "30"}],
                }
            },
            "partitions.name",
        ),
        (
            {
                "gpuforge:scheduler": {
                    "type": "slurm",
                    "controllerInstanceType": "m7i.2xlarge",
                    "partitions": [{"name": "gpu", "maxTime": "\u0663\u0660"}],
                }
            },
            "maxTime",
        ),
    ],
)
def test_the_stack_config_refuses_values_with_a_newline_a_unicode_digit_or_an_unknown_type(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(InputError) as caught:
        load_stack_config(_stack(tmp_path, **changes), "test")
    assert field in caught.value.message
    assert "Fix:" in caught.value.message


# --- the renderer checks every value it writes ---


def _cluster(**changes: object) -> SlurmCluster:
    values: dict[str, object] = {
        "name": "tc",
        "instance_type": hardware.get("p5.48xlarge"),
        "capacity_type": "on-demand",
        "max_nodes": 4,
        "scheduler": SLURM,
        "slurm_version": "26.05.5",
        "site": SITE,
    }
    values.update(changes)
    return SlurmCluster(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "My Stack"}, "name"),
        ({"slurm_version": "26.05.5\n"}, "slurm_version"),
        ({"max_nodes": 0}, "max_nodes"),
        (
            {"instance_type": dataclasses.replace(hardware.get("p5.48xlarge"), gpu_model="H100 NVL")},
            "GPU model",
        ),
        (
            {
                "scheduler": SchedulerSpec.model_construct(
                    type="slurm",
                    controller_instance_type="m7i.2xlarge",
                    partitions=(
                        PartitionSpec.model_construct(name="gpu Nodes=ALL", max_time=None, default=True),
                    ),
                )
            },
            "partitions",
        ),
        ({"topology": NetworkTopology(children={"leaf\nSwitchName=evil": frozenset()})}, "switch"),
    ],
)
def test_a_cluster_holding_a_value_slurm_would_misread_is_refused(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(InputError) as caught:
        render_files(_cluster(**changes))
    assert field in caught.value.message


@pytest.mark.parametrize(
    "changes",
    [
        {"controller_host": "ctl\nNodeName=ALL"},
        {"controller_addr": "10.0.0.10 extra"},
        {"slurm_user": "slurm\n"},
        {"state_dir": "/var/spool/slurm ctld"},
        {"slurmd_port": 0},
    ],
)
def test_a_site_value_slurm_would_misread_is_refused(changes: dict[str, object]) -> None:
    values: dict[str, Any] = {"controller_host": "t-slurmctld", "controller_addr": "10.0.0.10", **changes}
    with pytest.raises(InputError):
        SlurmSite(**values)


def test_a_leaf_switch_with_a_newline_does_not_reach_slurmd_s_conf() -> None:
    assert topology_argument("nn-0123456789abcdef0") == "Topology=default:nn-0123456789abcdef0"
    with pytest.raises(InputError, match="switch"):
        topology_argument("nn-1\nTopology=x")


@pytest.mark.parametrize("version", ["26.05.5\n", "\u0662\u0666.05.5", "26.05.5 "])
def test_a_slurm_version_is_read_whole_in_ascii(version: str) -> None:
    with pytest.raises(InputError, match="Slurm version"):
        versions.parse_version(version, where="slurm.version")


# --- names passed to scontrol ---


@pytest.mark.parametrize(
    "name", ["ALL", "gpunodes", "gpu-a,gpu-b", "gpu-[1-9]", "gpu-a State=RESUME", "gpu-a\n"]
)
def test_the_node_agent_refuses_a_node_name_scontrol_reads_as_other_nodes(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as parsed:
        main(["node", "check", "--slurm", "--node-name", name])
    assert parsed.value.code == 2
    assert "--node-name" in capsys.readouterr().err
    # The same rule holds for SLURMD_NODENAME and the hostname, which reach the agent without the flag.
    with pytest.raises(InputError, match="node name"):
        SlurmAgent(node=name, run=_no_commands, state_file=tmp_path / "state.json", report_asg=None)
    with pytest.raises(InputError, match="node name"):
        drain_argv(name, "gpuforge: xid 79")


def _no_commands(argv: object) -> CommandResult:
    raise AssertionError(f"no command may run for a refused node name: {argv}")


@pytest.mark.parametrize("cluster", ["c\nSwitchName=evil", "My Cluster"])
def test_the_topology_sync_refuses_a_cluster_name_before_asking_aws(cluster: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--cluster"):
        sync_topology(
            None,  # type: ignore[arg-type]  # AWS is never asked
            _no_commands,  # type: ignore[arg-type]
            cluster=cluster,
            instance_type="p5.48xlarge",
            topology_conf=tmp_path / "topology.conf",
        )
    assert not (tmp_path / "topology.conf").exists()


@pytest.mark.parametrize("version", ["26.05.5\n", "\u0662\u0666.05.5"])
def test_matrix_check_refuses_a_slurm_version_with_a_newline_or_unicode_digits(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    matrix["slurm"]["version"] = version
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    assert main(["matrix", "check", str(path)]) == 1
    assert "slurm.version" in capsys.readouterr().out


def test_a_hostile_slurm_version_flag_is_escaped_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["scheduler", "render", str(_stack(tmp_path)), "--stack", "test", "--out", str(tmp_path / "out")]
    assert main([*argv, "--slurm-version", "26.05.5\n\x1b[2J"]) == 2
    error = capsys.readouterr().err
    assert "\x1b" not in error and "'26.05.5\\n\\x1b[2J'" in error
