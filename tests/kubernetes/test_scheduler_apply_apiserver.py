"""`gpuforge scheduler apply` against a real kube-apiserver (kube_cluster.py: 1.35.8 built from k8s.io/kubernetes,
etcd 3.5 from Debian), one fresh server per test so no test sees another's objects.

"Kueue installed" is played by the test: Kueue's vendored CRDs (crds/, Kueue v0.17.6) are installed for real and
Established, and a Deployment `kueue-system/kueue-controller-manager` (the name Kueue's chart gives it for the
release `kueue`) is created with the image reference the chart writes from the rendered values
(`repository:tag`, the tag carrying the pinned digest). No Kueue controller runs (the server has no
controller-manager, scheduler or kubelet): apply checks what is installed, it does not wait on Kueue's work.
Namespaces are never deleted here: without the namespace controller a deleted one would stay Terminating.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_cluster import REPO, ApiServer, install_kueue_crds, open_api_server
from kube_support import EFA_REPOSITORY, pinned_efa_tag, publish_efa_plugin, push_image
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from gpuforge.cli import main
from gpuforge.kubernetes.addons import CLUSTER_LABEL, MANAGED_BY, MANAGED_BY_LABEL, kueue_values, pins
from gpuforge.kubernetes.apply import KUEUE_DEPLOYMENT, KUEUE_NAMESPACE, PRUNE_KINDS
from gpuforge.kubernetes.manifests import objects_of, stack_addons
from gpuforge.stack_config import load_stack_config

pytestmark = pytest.mark.slow
STACKS = REPO / "stacks" / "training"
STACK = "p5-eks"


def _stack_dir(tmp_path: Path, *, drop_team: str | None = None) -> Path:
    """stacks/training's Pulumi.yaml and p5-eks stack file in a folder of their own (matrix path made absolute),
    less the team `drop_team`, as a person editing the stack file would remove it."""
    folder = tmp_path / f"stack-{drop_team or 'all'}"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text(
        (STACKS / "Pulumi.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    data = yaml.safe_load((STACKS / f"Pulumi.{STACK}.yaml").read_text(encoding="utf-8"))
    cfg = data["config"]
    cfg["gpuforge:matrix"] = str((STACKS / cfg["gpuforge:matrix"]).resolve())
    if drop_team is not None:
        teams = cfg["gpuforge:scheduler"]["teams"]
        cfg["gpuforge:scheduler"]["teams"] = [team for team in teams if team["name"] != drop_team]
    (folder / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def _chart_image() -> str:
    """The manager image Kueue's chart writes from the rendered values: `repository:tag`."""
    image = kueue_values(pins().addons["kueue"].images[0])["controllerManager"]["manager"]["image"]
    return f"{image['repository']}:{image['tag']}"


def _fake_kueue(kubeconfig: Path, image: str) -> None:
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    core.create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})
    labels = {"control-plane": "controller-manager"}
    client.AppsV1Api(config.new_client_from_config(str(kubeconfig))).create_namespaced_deployment(
        KUEUE_NAMESPACE,
        {
            "metadata": {"name": KUEUE_DEPLOYMENT, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "manager", "image": image}]},
                },
            },
        },
    )


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[ApiServer]:
    """A server without Kueue."""
    folder = tmp_path / "apiserver"
    folder.mkdir()
    with open_api_server(folder) as server:
        yield server


@pytest.fixture
def with_kueue(bare: ApiServer) -> ApiServer:
    """A server with Kueue's CRDs and its controller Deployment at the pinned image."""
    install_kueue_crds(bare.kubeconfig)
    _fake_kueue(bare.kubeconfig, _chart_image())
    return bare


def _api(server: ApiServer) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(config.new_client_from_config(str(server.kubeconfig)))


def _apply(server: ApiServer | Path, stack_dir: Path, *flags: str) -> int:
    kubeconfig = server if isinstance(server, Path) else server.kubeconfig
    return main(
        ["scheduler", "apply", str(stack_dir), "--stack", STACK, "--kubeconfig", str(kubeconfig), *flags]
    )


@pytest.fixture(autouse=True)
def efa_registry(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """AWS's EKS add-on registry of the stack's region (moto), holding the pinned EFA plugin tag: apply reads its
    digest there (gpuforge.kubernetes.ecr_images), through the environment this fixture points at moto."""
    region = load_stack_config(STACKS, STACK).region
    ecr = publish_efa_plugin(moto_server, monkeypatch, region)
    push_image(ecr, pinned_efa_tag())
    yield ecr
    ecr.delete_repository(repositoryName=EFA_REPOSITORY, force=True)


def _rendered(stack_dir: Path) -> list[dict[str, Any]]:
    """What apply sends: the render with the EFA plugin's digest from the registry."""
    import boto3

    config = load_stack_config(stack_dir, STACK)
    return objects_of(stack_addons(config, ecr=boto3.client("ecr", region_name=config.region)))


def _read(api: dynamic.DynamicClient, obj: dict[str, Any]) -> Any:
    resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    metadata = obj["metadata"]
    return resource.get(name=metadata["name"], namespace=metadata.get("namespace"))


def _exists(
    api: dynamic.DynamicClient, api_version: str, kind: str, name: str, namespace: str | None = None
) -> bool:
    resource = api.resources.get(api_version=api_version, kind=kind)
    try:
        resource.get(name=name, namespace=namespace)
    except ApiException as error:
        assert error.status == 404, error
        return False
    return True


def _lines(output: str, word: str) -> set[str]:
    """The report's `word` lines, as 'Kind name' or 'Kind namespace/name' (a dry run's prefix and any note cut)."""
    found = set()
    for line in output.splitlines():
        verb, _, rest = line.removeprefix("dry run: ").partition(" ")
        if verb == word:
            found.add(rest.strip().split(" (", 1)[0])
    return found


def _name(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    where = f"{metadata['namespace']}/{metadata['name']}" if "namespace" in metadata else metadata["name"]
    return f"{obj['kind']} {where}"


KUEUE_API = "kueue.x-k8s.io/v1beta2"


def test_first_apply_creates_every_rendered_object_with_the_ownership_labels(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_dir = _stack_dir(tmp_path)
    assert _apply(with_kueue, stack_dir) == 0
    out = capsys.readouterr().out
    rendered = _rendered(stack_dir)
    assert _lines(out, "created") == {_name(obj) for obj in rendered}
    api = _api(with_kueue)
    for obj in rendered:
        found = _read(api, obj)
        assert found.metadata.labels[MANAGED_BY_LABEL] == MANAGED_BY
        assert found.metadata.labels[CLUSTER_LABEL] == STACK
        assert found.metadata.managedFields[0].manager == "gpuforge"
    queue = _read(api, {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "llm"}})
    assert queue.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == 96


def test_second_apply_changes_nothing(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_dir = _stack_dir(tmp_path)
    assert _apply(with_kueue, stack_dir) == 0
    api = _api(with_kueue)
    rendered = _rendered(stack_dir)
    versions = {_name(obj): _read(api, obj).metadata.resourceVersion for obj in rendered}
    capsys.readouterr()
    assert _apply(with_kueue, stack_dir) == 0
    out = capsys.readouterr().out
    assert _lines(out, "unchanged") == set(versions)
    assert not _lines(out, "created") | _lines(out, "changed") | _lines(out, "pruned")
    assert {_name(obj): _read(api, obj).metadata.resourceVersion for obj in rendered} == versions


def test_a_changed_quota_is_applied_and_reported_changed(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_dir = _stack_dir(tmp_path)
    assert _apply(with_kueue, stack_dir) == 0
    path = stack_dir / f"Pulumi.{STACK}.yaml"
    path.write_text(
        path.read_text(encoding="utf-8").replace("gpuQuota: 96", "gpuQuota: 64"), encoding="utf-8"
    )
    capsys.readouterr()
    assert _apply(with_kueue, stack_dir) == 0
    assert _lines(capsys.readouterr().out, "changed") == {"ClusterQueue llm"}
    queue = _read(
        _api(with_kueue), {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "llm"}}
    )
    assert queue.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == 64


def test_a_hand_edit_of_gpuforges_object_is_taken_back(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpuforge forces conflicts on its own objects: the render is their source of truth."""
    stack_dir = _stack_dir(tmp_path)
    assert _apply(with_kueue, stack_dir) == 0
    api = _api(with_kueue)
    queue = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "llm"}}
    edited = _read(api, queue).to_dict()
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 8
    resource = api.resources.get(api_version=KUEUE_API, kind="ClusterQueue")
    body = {**queue, "spec": edited["spec"]}
    resource.server_side_apply(body=body, name="llm", field_manager="someone", force_conflicts=True)
    capsys.readouterr()
    assert _apply(with_kueue, stack_dir) == 0
    assert _lines(capsys.readouterr().out, "changed") == {"ClusterQueue llm"}
    assert _read(api, queue).spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == 96


def test_a_removed_team_prunes_its_queues_and_nothing_else(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _apply(with_kueue, _stack_dir(tmp_path)) == 0
    api = _api(with_kueue)
    queues = api.resources.get(api_version=KUEUE_API, kind="ClusterQueue")
    # Another gpuforge cluster's queue, and one a person made: neither is this cluster's to delete.
    foreign = {MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: "other-cluster"}
    queues.create(
        body={
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": "other", "labels": foreign},
        }
    )
    queues.create(body={"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "by-hand"}})
    capsys.readouterr()
    smaller = _stack_dir(tmp_path, drop_team="vision")
    assert _apply(with_kueue, smaller, "--no-prune") == 0
    assert not _lines(capsys.readouterr().out, "pruned")
    assert _exists(api, KUEUE_API, "ClusterQueue", "vision")
    assert _apply(with_kueue, smaller) == 0
    out = capsys.readouterr().out
    assert _lines(out, "pruned") == {"ClusterQueue vision", "LocalQueue vision/vision"}
    assert not _exists(api, KUEUE_API, "ClusterQueue", "vision")
    assert not _exists(api, KUEUE_API, "LocalQueue", "vision", "vision")
    # The team's namespace holds its jobs: reported, never deleted.
    assert "Namespace vision" in _lines(out, "kept")
    assert _exists(api, "v1", "Namespace", "vision")
    for name in ("llm", "other", "by-hand"):
        assert _exists(api, KUEUE_API, "ClusterQueue", name)
    assert _exists(api, KUEUE_API, "LocalQueue", "llm", "llm")


def test_an_object_another_gpuforge_cluster_owns_is_refused_before_anything_is_applied(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = _api(with_kueue)
    classes = api.resources.get(api_version="scheduling.k8s.io/v1", kind="PriorityClass")
    labels = {MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: "other-cluster"}
    classes.create(
        body={
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "production", "labels": labels},
            "value": 5,
        }
    )
    assert _apply(with_kueue, _stack_dir(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "PriorityClass production (gpuforge cluster other-cluster)" in err and "Nothing was applied" in err
    assert not _exists(api, "v1", "Namespace", "llm")
    assert classes.get(name="production").value == 5


def test_kueue_missing_exits_2_with_the_helm_command_and_applies_nothing(
    bare: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_dir = _stack_dir(tmp_path)
    assert _apply(bare, stack_dir) == 2
    captured = capsys.readouterr()
    chart = pins().addons["kueue"].chart
    assert chart is not None and chart.repository is not None
    assert (
        f"helm upgrade --install kueue {chart.repository} --version {chart.version} --namespace {KUEUE_NAMESPACE} "
        "--create-namespace --values " in captured.err
    )
    assert "addons/kueue-values.yaml" in captured.err and "Traceback" not in captured.err
    assert "ClusterQueue" in captured.err  # what was found: the CRDs it lacks
    api = _api(bare)
    assert not _exists(api, "v1", "Namespace", "llm")
    assert not _exists(api, "scheduling.k8s.io/v1", "PriorityClass", "production")
    assert not _exists(api, "rbac.authorization.k8s.io/v1", "ClusterRole", "gpuforge-node-agent")


def test_kueue_crds_without_its_controller_exits_2(
    bare: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_kueue_crds(bare.kubeconfig)
    assert _apply(bare, _stack_dir(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"{KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}" in err and "helm upgrade --install kueue" in err
    assert not _exists(_api(bare), "v1", "Namespace", "llm")


def test_kueue_at_another_image_exits_2_naming_both(
    bare: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_kueue_crds(bare.kubeconfig)
    other = "registry.k8s.io/kueue/kueue:v0.16.0"
    _fake_kueue(bare.kubeconfig, other)
    assert _apply(bare, _stack_dir(tmp_path)) == 2
    err = capsys.readouterr().err
    digest = pins().addons["kueue"].images[0].digest
    assert other in err and str(digest) in err and "helm upgrade --install kueue" in err
    assert not _exists(_api(bare), "v1", "Namespace", "llm")


def test_dry_run_reports_and_changes_nothing(
    with_kueue: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_dir = _stack_dir(tmp_path)
    api = _api(with_kueue)
    assert _apply(with_kueue, stack_dir, "--dry-run") == 0
    out = capsys.readouterr().out
    rendered = _rendered(stack_dir)
    assert _lines(out, "created") == {_name(obj) for obj in rendered}
    assert "dry run" in out
    for obj in rendered:
        with pytest.raises(ApiException) as missing:
            _read(api, obj)
        assert missing.value.status == 404
    # After a real apply, a dry run of a smaller stack reports the prune and deletes nothing.
    assert _apply(with_kueue, stack_dir) == 0
    capsys.readouterr()
    smaller = _stack_dir(tmp_path, drop_team="vision")
    assert _apply(with_kueue, smaller, "--dry-run") == 0
    out = capsys.readouterr().out
    assert _lines(out, "pruned") == {"ClusterQueue vision", "LocalQueue vision/vision"}
    assert _lines(out, "unchanged") == {_name(obj) for obj in _rendered(smaller)}
    assert _exists(api, KUEUE_API, "ClusterQueue", "vision")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_an_unreachable_server_exits_2_with_where_to_run_it(
    bare: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = yaml.safe_load(bare.kubeconfig.read_text(encoding="utf-8"))
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{_closed_port()}"
    path = tmp_path / "unreachable.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    assert _apply(path, _stack_dir(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "cannot reach the Kubernetes API server" in err and "Traceback" not in err
    assert "bastion" in err and "Fix:" in err


def test_a_missing_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _apply(tmp_path / "none.kubeconfig", _stack_dir(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "none.kubeconfig" in err and "Fix:" in err and "Traceback" not in err


def test_a_slurm_stack_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["scheduler", "apply", str(STACKS), "--stack", "p5-prod", "--kubeconfig", str(tmp_path / "k")]
    assert main(args) == 2
    assert "gpuforge:scheduler.type = 'slurm'" in capsys.readouterr().err


def test_every_rendered_kind_is_one_prune_lists(tmp_path: Path) -> None:
    """Prune lists only PRUNE_KINDS: a kind the render gains must join it, or its removals would stay."""
    kinds = {(obj["apiVersion"], obj["kind"]) for obj in _rendered(_stack_dir(tmp_path))}
    assert kinds <= set(PRUNE_KINDS)
