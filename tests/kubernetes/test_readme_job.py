"""The README's multi-node job example ("Running jobs on EKS") is one the p5-eks cluster admits.

It is checked against the pinned Kubernetes OpenAPI schema, and every name it uses against what
`gpuforge scheduler render` writes for stacks/training's p5-eks: its team's LocalQueue, a
WorkloadPriorityClass and PriorityClass, a level of the Topology; its GPU and EFA requests are the
catalog's per-node counts for the stack's instance type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from k8s_schemas import validate
from kube_support import KUBERNETES_VERSIONS, readme_example

from gpuforge import hardware
from gpuforge.cli import main

REPO = Path(__file__).resolve().parents[2]


def _rendered(tmp_path: Path) -> dict[str, dict[str, Any]]:
    out = tmp_path / "k8s"
    assert (
        main(["scheduler", "render", str(REPO / "stacks/training"), "--stack", "p5-eks", "--out", str(out)])
        == 0
    )
    return {
        path.relative_to(out).as_posix(): yaml.safe_load(path.read_text()) for path in out.rglob("*.yaml")
    }


def test_the_readme_job_is_valid_and_names_what_the_render_writes(tmp_path: Path) -> None:
    documents = readme_example()
    for document in documents:
        validate(document, KUBERNETES_VERSIONS[-1])
    (job,) = [document for document in documents if document["kind"] == "Job"]
    rendered = _rendered(tmp_path)
    namespace = job["metadata"]["namespace"]
    queue = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert f"localqueue/{namespace}.{queue}.yaml" in rendered
    priority = job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    pod = job["spec"]["template"]
    assert f"workloadpriorityclass/{priority}.yaml" in rendered
    assert f"priorityclass/{pod['spec']['priorityClassName']}.yaml" in rendered
    (topology,) = [body for path, body in rendered.items() if path.startswith("topology/")]
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] in levels
    node = hardware.get("p5.48xlarge")
    (container,) = pod["spec"]["containers"]
    resources = container["resources"]
    assert (
        resources["requests"]
        == resources["limits"]
        == {
            "nvidia.com/gpu": node.gpu_count,
            "vpc.amazonaws.com/efa": node.max_efa_interfaces,
        }
    )
    assert "@sha256:" in container["image"]
    shm = {mount["name"] for mount in container["volumeMounts"] if mount["mountPath"] == "/dev/shm"}
    assert [v["emptyDir"] for v in pod["spec"]["volumes"] if v["name"] in shm] == [{"medium": "Memory"}]
