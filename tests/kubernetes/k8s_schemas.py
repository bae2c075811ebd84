"""Validators for rendered objects: the official Kubernetes OpenAPI schemas and Kueue's CRD schemas.

Core objects go through kubernetes-validate (PyPI), which carries the official schemas per
Kubernetes version. Kueue's objects are validated with jsonschema against the `openAPIV3Schema`
of the CRDs vendored in tests/kubernetes/crds (their source and sums are in its README).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CRDS = Path(__file__).parent / "crds"
KUEUE_GROUP = "kueue.x-k8s.io"
# The sums tests/kubernetes/crds/README.md records for the vendored v0.17.6 files.
CRD_SHA256 = {
    "kueue.x-k8s.io_clusterqueues.yaml": "666f5466bf85ace8c494a9a790ba87c4c18ddf3ab3eb9f18c878927d396869f3",
    "kueue.x-k8s.io_localqueues.yaml": "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed",
    "kueue.x-k8s.io_resourceflavors.yaml": "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
    "kueue.x-k8s.io_topologies.yaml": "0debce5049a3931db15c99d8acddb0cc509c24fedc98f0bb0235095f7092fc11",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml": "b6c089d45938adf9afd21da05a6c613f29408989aa66afc09db189eb724db5a3",
    "kueue.x-k8s.io_workloads.yaml": "75ea8518856e1518b5554aa3f1414191c6fa0c8db7a99df48a1408c7796ef162",
}


def crd_sums() -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(CRDS.glob("*.yaml"))}


@cache
def _kueue_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, for every served version of every vendored CRD."""
    found = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                found[(f"{crd['spec']['group']}/{version['name']}", kind)] = version["schema"][
                    "openAPIV3Schema"
                ]
    return found


def validate_kueue(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError (or KeyError for an unknown kind) unless `obj` fits its CRD."""
    schema = _kueue_schemas()[(obj["apiVersion"], obj["kind"])]
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)


def validate_core(obj: dict[str, Any], kubernetes_version: str) -> None:
    """Raise kubernetes_validate.ValidationError unless `obj` fits the official schema (strict: no unknown fields)."""
    kubernetes_validate.validate(obj, kubernetes_version, strict=True)


def validate(obj: dict[str, Any], kubernetes_version: str) -> None:
    if obj["apiVersion"].startswith(KUEUE_GROUP + "/"):
        validate_kueue(obj)
    else:
        validate_core(obj, kubernetes_version)
