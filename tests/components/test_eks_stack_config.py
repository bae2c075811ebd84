"""`gpuforge:scheduler` with `type: kubernetes` as a stack file writes it: keys read, bad values refused by key."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stack_files import MATRIX, slurm_stack, write_stack

from gpuforge.errors import InputError
from gpuforge.stack_config import load_stack_config

KUBERNETES = {
    "type": "kubernetes",
    "kubernetesVersion": "1.35",  # the shipped H100 matrix's kubernetes.version
    "systemNodeType": "m7i.xlarge",
    "adminRoleArn": "arn:aws:iam::123456789012:role/platform-admin",
    "qos": [{"name": "production", "priority": 1000}],
    "teams": [{"name": "llm", "users": ["alice"], "gpuQuota": 8, "qos": ["production"]}],
}


def _load(tmp_path: Path, **changes: Any) -> Any:
    block = {key: value for key, value in {**KUBERNETES, **changes}.items() if value is not None}
    folder = write_stack(tmp_path / "stack", "dev", slurm_stack(**{"gpuforge:scheduler": block}))
    return load_stack_config(folder, "dev")


def test_kubernetes_keys_are_read(tmp_path: Path) -> None:
    config = _load(tmp_path)
    assert config.scheduler.type == "kubernetes"
    assert config.scheduler.kubernetes_version == "1.35"
    assert config.scheduler.system_node_type == "m7i.xlarge"
    assert config.scheduler.teams[0].gpu_quota == 8
    assert config.slurm_version is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kubernetesVersion": "1.33.2"}, "gpuforge:scheduler.kubernetesVersion = '1.33.2'"),
        ({"systemNodeType": None}, "gpuforge:scheduler.systemNodeType = None"),
        ({"controllerInstanceType": "m7i.2xlarge"}, "controllerInstanceType is not a key of a kubernetes"),
    ],
)
def test_bad_kubernetes_keys_are_refused_by_name(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, **changes)
    message = caught.value.message
    assert expected in message and "Pulumi.dev.yaml" in message and "Fix:" in message, message


def test_a_kubernetes_version_other_than_the_matrix_pin_is_refused(tmp_path: Path) -> None:
    """The AMI is built for the matrix's control-plane minor; its kubelet's skew was checked against it."""
    with pytest.raises(InputError) as caught:
        _load(tmp_path, kubernetesVersion="1.34")
    message = caught.value.message
    assert "gpuforge:scheduler.kubernetesVersion = '1.34'" in message and "Pulumi.dev.yaml" in message
    assert "kubernetes.version '1.35'" in message and MATRIX.name in message and "Fix:" in message, message


def test_a_matrix_without_kubernetes_parts_is_refused_for_a_kubernetes_stack(tmp_path: Path) -> None:
    matrix = MATRIX.parent / "p4d-a100-cuda12.yaml"  # a Slurm-only matrix: no kubernetes block
    block = dict(KUBERNETES)
    config = slurm_stack(**{"gpuforge:scheduler": block, "gpuforge:matrix": str(matrix)})
    config["gpuforge:instanceType"] = "p4d.24xlarge"
    folder = write_stack(tmp_path / "stack", "dev", config)
    with pytest.raises(InputError) as caught:
        load_stack_config(folder, "dev")
    message = caught.value.message
    assert "gpuforge:scheduler.type = 'kubernetes'" in message and "p4d-a100-cuda12.yaml" in message
    assert "no `kubernetes:` block" in message and "Fix:" in message, message
