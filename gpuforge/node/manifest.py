"""The image manifest, /etc/gpuforge/manifest.json, as the node agent reads it.

The image pipeline writes this file into every AMI: which matrix built the
image, which instance types it targets, and the exact version of each pinned
component. The node agent compares the running node against it. It is read
with the standard library only (no pydantic on a bare node), and every
problem is reported as an InputError naming the file, the field and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError

DEFAULT_MANIFEST = Path("/etc/gpuforge/manifest.json")
SCHEMA_VERSION = 1
MATRIX_KEYS = ("name", "version", "digest")
REQUIRED_COMPONENTS = (
    "kernel",
    "nvidia_driver",
    "nvidia_kernel_modules",
    "fabricmanager",
    "cuda",
    "cudnn",
    "nccl",
    "efa_installer",
    "libfabric",
    "aws_ofi_nccl",
    "lustre_client",
    "container_toolkit",
    "dcgm",
)
OPTIONAL_COMPONENTS = ("nvlsm",)
KERNEL_MODULE_FLAVORS = ("open", "proprietary")
FIX = "Fix: rebuild the image with the image pipeline, which writes a complete manifest."


@dataclass(frozen=True)
class Manifest:
    path: Path
    matrix_name: str
    matrix_version: str
    matrix_digest: str
    targets: tuple[str, ...]
    components: Mapping[str, str]

    @property
    def nvidia_driver(self) -> str:
        return self.components["nvidia_driver"]

    @property
    def kernel_modules(self) -> str:
        return self.components["nvidia_kernel_modules"]

    @property
    def fabricmanager(self) -> str:
        return self.components["fabricmanager"]

    @property
    def kernel(self) -> str:
        return self.components["kernel"]

    @property
    def nvlsm(self) -> str | None:
        return self.components.get("nvlsm")


def _error(path: Path, field: str, rule: str, found: object) -> InputError:
    return InputError(f"{path}: field {field!r}: {rule}; found {found!r}. {FIX}")


def _text(path: Path, data: Mapping[str, Any], key: str, field: str) -> str:
    if key not in data:
        raise _error(path, field, "is required but missing", None)
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise _error(path, field, "must be a non-empty string", value)
    return value


def _mapping(path: Path, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    if key not in data:
        raise _error(path, key, "is required but missing", None)
    value = data[key]
    if not isinstance(value, dict):
        raise _error(path, key, "must be an object", value)
    return value


def load_manifest(path: Path = DEFAULT_MANIFEST) -> Manifest:
    """Read and validate the manifest; raise InputError (exit 2) for anything unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(
            f"{path}: cannot read the image manifest ({error.strerror or error}). "
            "Fix: run on an image built by gpuforge, or pass --manifest PATH."
        ) from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}). {FIX}"
        ) from error
    if not isinstance(data, dict):
        raise _error(path, "(top level)", "must be a JSON object", type(data).__name__)

    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        raise _error(path, "schema", f"must be {SCHEMA_VERSION} (the version this agent reads)", schema)

    matrix = _mapping(path, data, "matrix")
    name, version, digest = (_text(path, matrix, key, f"matrix.{key}") for key in MATRIX_KEYS)

    if "targets" not in data:
        raise _error(path, "targets", "is required but missing", None)
    targets = data["targets"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise _error(path, "targets", "must be a non-empty list of instance type names", targets)

    raw_components = _mapping(path, data, "components")
    components = {key: _text(path, raw_components, key, f"components.{key}") for key in REQUIRED_COMPONENTS}
    for key in OPTIONAL_COMPONENTS:
        if key in raw_components:
            components[key] = _text(path, raw_components, key, f"components.{key}")
    flavor = components["nvidia_kernel_modules"]
    if flavor not in KERNEL_MODULE_FLAVORS:
        raise _error(
            path,
            "components.nvidia_kernel_modules",
            f"must be one of {', '.join(KERNEL_MODULE_FLAVORS)}",
            flavor,
        )
    return Manifest(
        path=path,
        matrix_name=name,
        matrix_version=version,
        matrix_digest=digest,
        targets=tuple(targets),
        components=components,
    )
