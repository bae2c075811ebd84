"""The image manifest, /etc/gpuforge/manifest.json, as the node agent reads it.

The image pipeline writes this file into every AMI: which matrix built the
image, which instance types it targets, and the exact version of each pinned
component. The node agent compares the running node against it. It is read
with the standard library only (no pydantic on a bare node), and every
problem is reported as an InputError naming the file, the field and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import load_json

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
# As images/scripts/90-verify.sh writes them: each only where the matrix pins it (the monitoring
# daemons' versions are the release builds 77-monitoring.sh installed and 90-verify.sh checked).
OPTIONAL_COMPONENTS = ("nvlsm", "slurm", "pmix", "nccl_tests", "node_exporter", "prometheus", "alertmanager")
KERNEL_MODULE_FLAVORS = ("open", "proprietary")
TOP_KEYS = ("schema", "matrix", "targets", "components")
# A matrix digest: sha256 hex as 90-verify.sh writes it (older manifests prefix it with `sha256:`).
# Matched whole (fullmatch): `$` under re.match would let a trailing newline through.
DIGEST = re.compile(r"(sha256:)?[0-9a-f]{64}")
# Every text value is one word of printable ASCII: versions, names and instance types are
# compared byte for byte with what the node reports, and printed in reports and drain reasons.
WORD = re.compile(r"[!-~]{1,200}")
WORD_RULE = (
    "must be one word of printable ASCII, 1-200 characters (no space, tab, newline, escape or other "
    "control character, and nothing outside ASCII)"
)
FIX = "Fix: rebuild the image with the image pipeline, which writes a complete manifest."
WORD_FIX = (
    "Fix: remove the stray characters (a trailing newline is the usual one, from a value written with "
    "`echo`), or rebuild the image with the image pipeline, which writes each value as one word."
)


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


def _error(path: Path, field: str, rule: str, found: object, fix: str = FIX) -> InputError:
    return InputError(f"{path}: field {field!r}: {rule}; found {cut(found)}. {fix}")


def _word(path: Path, value: object, field: str) -> str:
    """A non-empty string that is one word of printable ASCII, else an InputError naming the field."""
    if not isinstance(value, str) or not value.strip():
        raise _error(path, field, "must be a non-empty string", value)
    if WORD.fullmatch(value) is None:
        raise _error(path, field, WORD_RULE, value, WORD_FIX)
    return value


def _text(path: Path, data: Mapping[str, Any], key: str, field: str) -> str:
    if key not in data:
        raise _error(path, field, "is required but missing", None)
    return _word(path, data[key], field)


def _mapping(path: Path, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    if key not in data:
        raise _error(path, key, "is required but missing", None)
    value = data[key]
    if not isinstance(value, dict):
        raise _error(path, key, "must be an object", value)
    return value


def _known_keys(path: Path, data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """Unknown keys are errors, as in matrices: a misspelt key would otherwise pass as absent."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _error(
            path,
            f"{where}{unknown[0]}",
            f"is not a manifest key (known: {', '.join(known)})",
            data[unknown[0]],
        )


def load_manifest(path: Path = DEFAULT_MANIFEST) -> Manifest:
    """Read and validate the manifest; raise InputError (exit 2) for anything unusable."""
    data = load_json(
        path,
        what="image manifest",
        fix="run on an image built by gpuforge, or pass --manifest PATH; a damaged manifest needs the image "
        "rebuilt with the image pipeline",
    )
    if not isinstance(data, dict):
        raise _error(path, "(top level)", "must be a JSON object", type(data).__name__)
    _known_keys(path, data, TOP_KEYS, "")

    schema = data.get("schema")
    # bool is an int in Python: `"schema": true` would equal 1 without the type check.
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise _error(
            path, "schema", f"must be the integer {SCHEMA_VERSION} (the version this agent reads)", schema
        )

    matrix = _mapping(path, data, "matrix")
    _known_keys(path, matrix, MATRIX_KEYS, "matrix.")
    name, version, digest = (_text(path, matrix, key, f"matrix.{key}") for key in MATRIX_KEYS)
    if not DIGEST.fullmatch(digest):
        raise _error(
            path,
            "matrix.digest",
            "must be a matrix digest (64 lowercase hex digits, optionally after `sha256:`)",
            digest,
        )

    if "targets" not in data:
        raise _error(path, "targets", "is required but missing", None)
    targets = data["targets"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise _error(path, "targets", "must be a non-empty list of instance type names", targets)
    for position, target in enumerate(targets):
        _word(path, target, f"targets[{position}]")

    if len(set(targets)) != len(targets):
        raise _error(path, "targets", "must name each instance type once", targets)

    raw_components = _mapping(path, data, "components")
    _known_keys(path, raw_components, REQUIRED_COMPONENTS + OPTIONAL_COMPONENTS, "components.")
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
