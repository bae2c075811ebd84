"""`gpuforge plan` with a Slurm scheduler: the controller in the tree and summary, --slurm-conf, the JSON key,
and bad `gpuforge:scheduler` blocks refused with exit 2, naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from plan_support import MATRICES, STACK_DIR, StackCopy

from gpuforge.cli import main
from gpuforge.plan.stack_plan import plan
from gpuforge.stack_config import load_stack_config

SCHEDULER_KEYS = [
    "type",
    "slurm_version",
    "controller_instance_type",
    "controller_host",
    "controller_address",
    "partitions",
    "files",
]


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_p5_prod_plans_with_its_controller(catalog_path: Path) -> None:
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    assert result.mandatory_failures == ()
    mocks = result.run.mocks
    (controller,) = mocks.of_type("gpuforge:scheduler:SlurmController")
    assert controller.name == "p5-prod-slurm"
    children = {resource.type for resource in mocks.children(controller)}
    assert {
        "aws:ec2/instance:Instance",
        "aws:ebs/volume:Volume",
        "aws:ec2/volumeAttachment:VolumeAttachment",
        "aws:ec2/securityGroup:SecurityGroup",
        "aws:secretsmanager/secret:Secret",
        "aws:secretsmanager/secretVersion:SecretVersion",
        "random:index/randomBytes:RandomBytes",
    } <= children
    config = load_stack_config(STACK_DIR, "p5-prod")
    scheduler = result.summary["scheduler"]
    assert (scheduler["type"], scheduler["controller_instance_type"]) == ("slurm", "m7i.2xlarge")
    assert scheduler["slurm_version"] == config.slurm_version == "26.05.5"
    assert [partition["name"] for partition in scheduler["partitions"]] == ["gpu", "debug"]
    assert set(result.slurm_config) == {
        "slurm.conf",
        "gres.conf",
        "cgroup.conf",
        "topology.conf",
        "slurmdbd.conf",
        "gpuforge-accounts.json",
    }
    # No advisory verdict either: the controller is a CPU type.
    assert [verdict.policy for verdict in result.verdicts] == []


def test_text_shows_the_controller_and_slurm_conf_on_request(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    args = (str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path))
    code, out, _ = _plan(capsys, *args)
    assert code == 0
    assert "gpuforge:scheduler:SlurmController  p5-prod-slurm" in out
    assert "aws:ec2/instance:Instance  p5-prod-slurm-instance" in out
    assert (
        "  scheduler  Slurm 26.05.5, controller m7i.2xlarge p5-prod-slurmctld at 10.0.0.10; "
        "partitions gpu (default, max time 2-00:00:00), debug (max time 01:00:00)\n"
    ) in out
    assert "ClusterName=" not in out

    code, with_conf, _ = _plan(capsys, *args, "--slurm-conf")
    assert code == 0
    assert with_conf.startswith(out.rstrip("\n"))
    conf = with_conf[with_conf.index("slurm.conf (served by p5-prod-slurmctld at 10.0.0.10):\n") :]
    assert "ClusterName=p5-prod\nSlurmctldHost=p5-prod-slurmctld(10.0.0.10)\n" in conf
    assert "PartitionName=gpu Nodes=gpunodes Default=YES MaxTime=2-00:00:00 State=UP\n" in conf


def test_json_carries_the_scheduler_and_its_files(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code, out, _ = _plan(
        capsys, str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path), "--json"
    )
    assert code == 0
    document = json.loads(out)
    scheduler = document["scheduler"]
    assert list(scheduler) == SCHEDULER_KEYS
    assert {key: scheduler[key] for key in SCHEDULER_KEYS[:5]} == {
        key: document["summary"]["scheduler"][key] for key in SCHEDULER_KEYS[:5]
    }
    assert scheduler["partitions"][0] == {"name": "gpu", "max_time": "2-00:00:00", "default": True}
    assert sorted(scheduler["files"]) == [
        "cgroup.conf",
        "gpuforge-accounts.json",
        "gres.conf",
        "slurm.conf",
        "slurmdbd.conf",
        "topology.conf",
    ]
    assert "SlurmctldHost=p5-prod-slurmctld(10.0.0.10)" in scheduler["files"]["slurm.conf"]
    assert "Name=gpu Type=h100 File=/dev/nvidia7" in scheduler["files"]["gres.conf"]


def test_a_stack_without_slurm_has_an_empty_scheduler(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code, out, _ = _plan(capsys, str(STACK_DIR), "--stack", "dev", "--catalog", str(catalog_path), "--json")
    assert code == 0
    scheduler = json.loads(out)["scheduler"]
    assert scheduler == {
        "type": "none",
        "slurm_version": None,
        "controller_instance_type": None,
        "controller_host": None,
        "controller_address": None,
        "partitions": [],
        "files": {},
    }
    code, out, _ = _plan(
        capsys, str(STACK_DIR), "--stack", "dev", "--catalog", str(catalog_path), "--slurm-conf"
    )
    assert code == 0
    assert "  scheduler  none\n" in out
    assert "slurm.conf: none; the stack has no Slurm scheduler" in out


def _no_slurm_matrix(folder: Path) -> Path:
    """The shipped p5 matrix without its Slurm and PMIx pins."""
    data = yaml.safe_load((MATRICES / "p5-h100-cuda12.yaml").read_text(encoding="utf-8"))
    del data["slurm"], data["pmix"]
    path = folder / "p5-no-slurm.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


SLURM = {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"}


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        (
            {**SLURM, "partitions": [{"name": "gpu"}, {"name": "gpu", "maxTime": "60"}]},
            "gpuforge:scheduler.partitions = ['gpu', 'gpu']: partition names must be unique",
        ),
        (
            {**SLURM, "partitions": [{"name": "gpu,debug"}]},
            "gpuforge:scheduler.partitions.name = 'gpu,debug': a Slurm partition name is",
        ),
        ({**SLURM, "partitions": [{"name": "DEFAULT"}]}, "gpuforge:scheduler.partitions.name = 'DEFAULT'"),
        ({**SLURM, "controllerType": "m7i.2xlarge"}, "gpuforge:scheduler.controllerType: unknown key"),
        (
            {**SLURM, "partitions": [{"name": "gpu", "max_time": "60"}]},
            "gpuforge:scheduler.partitions.0.max_time: unknown key",
        ),
        ({"type": "slurm"}, "gpuforge:scheduler.controllerInstanceType = None"),
        ({"type": "pbs"}, "gpuforge:scheduler.type = 'pbs'"),
    ],
)
def test_bad_scheduler_blocks_exit_2_naming_the_key(
    capsys: pytest.CaptureFixture[str],
    stack_copy: StackCopy,
    catalog_path: Path,
    scheduler: dict[str, Any],
    expected: str,
) -> None:
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:scheduler": scheduler})
    code, out, err = _plan(capsys, str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert (code, out) == (2, "")
    assert expected in err, err
    assert str(stack_dir / "Pulumi.p5-prod.yaml") in err
    assert "Fix:" in err and "Traceback" not in err


def test_slurm_on_a_matrix_without_slurm_exits_2_naming_the_matrix_and_the_fix(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path, tmp_path: Path
) -> None:
    matrix = _no_slurm_matrix(tmp_path)
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:matrix": str(matrix)})
    code, out, err = _plan(capsys, str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path))
    assert (code, out) == (2, "")
    assert "gpuforge:scheduler.type = 'slurm', but gpuforge:matrix" in err
    assert "p5-no-slurm.yaml pins no Slurm" in err
    assert "Fix: add `slurm: {version, sha256, url}`" in err and "gpuforge:scheduler.type: none" in err
    assert "Traceback" not in err


def test_json_and_slurm_conf_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--json", "--slurm-conf"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
