"""Every Kubernetes object `gpuforge scheduler render` writes is accepted by a real kube-apiserver.

The API server (kube_cluster.py: kube-apiserver 1.35.8 built from k8s.io/kubernetes, etcd 3.5
from Debian) has Kueue's vendored CRDs (crds/, Kueue v0.17.6) installed for real; the rendered
namespaces are created, every other rendered object is sent with server-side dry run
(`dryRun=All`): admission, the built-in types' validation and the CRDs' structural schemas and
CEL rules (`x-kubernetes-validations`, which the jsonschema checks cannot run) all apply, and
nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_cluster import REPO, ApiServer, install_kueue_crds, open_api_server
from kubernetes import config, dynamic
from kubernetes.client.exceptions import ApiException

from gpuforge.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with open_api_server(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture(scope="module")
def kueue_api(api_server: ApiServer) -> dynamic.DynamicClient:
    """A dynamic client of the server, with Kueue's CRDs installed and Established."""
    install_kueue_crds(api_server.kubeconfig)
    return dynamic.DynamicClient(config.new_client_from_config(str(api_server.kubeconfig)))


def rendered(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The Kubernetes objects of stacks/training's p5-eks, by file (Helm values and index.yaml excluded)."""
    out = tmp_path / "rendered"
    assert (
        main(["scheduler", "render", str(REPO / "stacks/training"), "--stack", "p5-eks", "--out", str(out)])
        == 0
    )
    objects = []
    for path in sorted(out.rglob("*.yaml")):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(body, dict) and "apiVersion" in body and "kind" in body:
            objects.append((str(path.relative_to(out)), body))
    return objects


def create(api: dynamic.DynamicClient, body: dict[str, Any], *, dry_run: bool) -> None:
    resource = api.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace")
    kwargs: dict[str, Any] = {"body": body, "namespace": namespace} if namespace else {"body": body}
    if dry_run:
        kwargs["query_params"] = [("dryRun", "All")]
    resource.create(**kwargs)


def test_every_rendered_object_is_accepted_by_the_api_server(
    kueue_api: dynamic.DynamicClient, tmp_path: Path
) -> None:
    objects = rendered(tmp_path)
    kinds = {body["kind"] for _, body in objects}
    # The render's whole set reaches the server: the Kueue kinds (CEL rules) and the core ones.
    assert {"Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"} <= kinds
    assert {"Namespace", "PriorityClass", "DaemonSet"} <= kinds
    # The node agent's identity (gpuforge/kubernetes/node_agent.py).
    assert {"ClusterRole", "ClusterRoleBinding"} <= kinds
    refused = []
    for kind_first in (True, False):  # namespaces first (created), then the rest (dry run) inside them
        for name, body in objects:
            if (body["kind"] == "Namespace") != kind_first:
                continue
            try:
                create(kueue_api, body, dry_run=not kind_first)
            except ApiException as error:
                refused.append(f"{name}: HTTP {error.status} {error.body}")
    assert refused == []


def test_the_dry_run_runs_the_crds_cel_rules(kueue_api: dynamic.DynamicClient, tmp_path: Path) -> None:
    """The check above can fail: a Topology with the hostname level not last breaks Kueue's CEL rule."""
    (topology,) = [body for _, body in rendered(tmp_path) if body["kind"] == "Topology"]
    levels = topology["spec"]["levels"]
    topology["spec"]["levels"] = [levels[-1], *levels[:-1]]
    assert topology["spec"]["levels"][0]["nodeLabel"] == "kubernetes.io/hostname"
    with pytest.raises(ApiException) as refused:
        create(kueue_api, topology, dry_run=True)
    assert refused.value.status == 422
    assert "kubernetes.io/hostname label can only be used at the lowest level" in str(refused.value.body)
