"""The typed configuration of a gpuforge training stack.

A stack's settings live in `stacks/<project>/Pulumi.<stack>.yaml` under the
`gpuforge:` namespace, plus `aws:region`:

```yaml
config:
  aws:region: us-east-1
  gpuforge:matrix: ../../images/matrices/p5-h100-cuda12.yaml  # relative to the stack directory
  gpuforge:instanceType: p5.48xlarge
  gpuforge:nodeCount: 16
  gpuforge:nodeMode: asg                # asg | instances
  gpuforge:availabilityZone: us-east-1a # a zone name in aws:region, or a zone id such as use1-az4
  gpuforge:capacity:
    type: capacity-block                # on-demand | reservation | capacity-block
    reservationId: cr-0123456789abcdef0 # reservation and capacity-block
    placementGroup: my-cluster-pg       # optional: an existing cluster placement group
    start: "2025-07-01T11:30:00Z"       # optional pair, timezone required
    end: "2025-07-15T11:30:00Z"
  gpuforge:lustre:                      # optional: no key, no file system
    deploymentType: PERSISTENT_2
    storageCapacityGiB: 4800
    throughputPerTiB: 250               # PERSISTENT deployment types only
    s3Path: s3://bucket/prefix          # optional data repository association
  gpuforge:catalog: ../../images/catalog.local.json  # optional, relative to the stack directory
```

Relative paths (`gpuforge:matrix`, `gpuforge:catalog`) are resolved against the
stack directory, the folder that holds `Pulumi.yaml`: Pulumi runs the program
there, so the same file works for `pulumi up` and for `gpuforge plan` from any
working directory.

Two readers share one validation:
- `load_stack_config` reads the YAML files (for `gpuforge plan`, `gpuforge preflight`).
- `stack_config_from_pulumi` reads the config the Pulumi engine hands the
  running program (for `pulumi up` and the mocked plan).

The engine hands every value to a program as a string (objects and numbers as
JSON text), so the file reader first turns values into those same strings with
`engine_config`; both readers then decode and validate identically, and a stack
file that passes here is read the same way under the real engine.

This module checks the shape and types of the config, and the relations between
its own keys. What an instance type, capacity type or file system allows is the
cluster component's to decide (gpuforge.components), so that rule lives there once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from gpuforge.errors import InputError

NAMESPACE = "gpuforge"
REGION_KEY = "aws:region"

# The keys gpuforge reads, and how the engine's string for each decodes:
# "str" values are used as given, "json" values are JSON text (numbers, objects).
_KEY_KINDS: dict[str, Literal["str", "json"]] = {
    "matrix": "str",
    "instanceType": "str",
    "nodeCount": "json",
    "nodeMode": "str",
    "availabilityZone": "str",
    "capacity": "json",
    "lustre": "json",
    "catalog": "str",
}
KNOWN_KEYS: tuple[str, ...] = tuple(f"{NAMESPACE}:{key}" for key in _KEY_KINDS)

DOC = "the gpuforge:* keys are listed in gpuforge/stack_config.py and the README ('Stacks')"

_REGION_PATTERN = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_ZONE_ID_PATTERN = re.compile(r"^[a-z]{2,4}\d+-az\d+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class CapacityConfig(_Strict):
    """Where the nodes' capacity comes from (`gpuforge:capacity`)."""

    type: Literal["on-demand", "reservation", "capacity-block"]
    reservation_id: StrictStr | None = Field(
        default=None, alias="reservationId", pattern=r"^cr-[0-9a-f]{8,17}$"
    )
    placement_group: StrictStr | None = Field(default=None, alias="placementGroup", min_length=1)
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CapacityConfig:
        if self.type == "on-demand" and self.reservation_id is not None:
            raise ValueError(
                "reservationId is set but type is on-demand; "
                "set type to reservation or capacity-block, or remove reservationId"
            )
        if self.type != "on-demand" and self.reservation_id is None:
            raise ValueError(
                f"type {self.type} needs reservationId (the cr-... id of the reservation or Capacity Block)"
            )
        if (self.start is None) != (self.end is None):
            raise ValueError("start and end go together: give both, or neither")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ValueError(f"end {self.end.isoformat()} is not after start {self.start.isoformat()}")
        return self


class LustreConfig(_Strict):
    """The FSx for Lustre file system (`gpuforge:lustre`)."""

    deployment_type: Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"] = Field(
        alias="deploymentType"
    )
    storage_capacity_gib: StrictInt = Field(alias="storageCapacityGiB", gt=0)
    throughput_per_tib: StrictInt | None = Field(default=None, alias="throughputPerTiB", gt=0)
    s3_path: StrictStr | None = Field(default=None, alias="s3Path", pattern=r"^s3://[a-z0-9.-]{3,63}(/.*)?$")

    @model_validator(mode="after")
    def _throughput_for_persistent(self) -> LustreConfig:
        persistent = self.deployment_type.startswith("PERSISTENT")
        if persistent and self.throughput_per_tib is None:
            raise ValueError(f"deploymentType {self.deployment_type} needs throughputPerTiB")
        if not persistent and self.throughput_per_tib is not None:
            raise ValueError(
                f"throughputPerTiB applies to PERSISTENT deployment types only, not {self.deployment_type}; "
                "remove it"
            )
        return self


class _GpuforgeKeys(_Strict):
    """The `gpuforge:` keys as decoded values; field names are the keys without namespace."""

    matrix: StrictStr = Field(min_length=1)
    instanceType: StrictStr = Field(min_length=1)  # the field names are the config keys
    nodeCount: StrictInt = Field(ge=1)
    nodeMode: Literal["asg", "instances"]
    availabilityZone: StrictStr = Field(min_length=1)
    capacity: CapacityConfig
    lustre: LustreConfig | None = None
    catalog: StrictStr | None = Field(default=None, min_length=1)


class StackConfig(BaseModel):
    """One stack's validated settings; paths are absolute."""

    model_config = ConfigDict(frozen=True)

    project: str
    stack: str
    stack_dir: Path
    source: str  # where the values came from, for messages
    matrix_path: Path
    instance_type: str
    node_count: int
    node_mode: Literal["asg", "instances"]
    availability_zone: str
    region: str
    capacity: CapacityConfig
    lustre: LustreConfig | None
    catalog_path: Path | None  # None: the default catalog (gpuforge.images.catalog.DEFAULT_CATALOG)
    engine_values: dict[str, str]  # every config key as the engine hands it to the program


class _PlainStrings(yaml.SafeLoader):
    """YAML loader that keeps timestamps as text, as the Pulumi CLI hands them to a program."""


_PlainStrings.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _read_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file. Fix: {what}.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the file ({error}). Fix: {what}.") from None
    try:
        return yaml.load(text, Loader=_PlainStrings)  # a SafeLoader subclass
    except yaml.YAMLError as error:
        raise InputError(
            f"{path}: not valid YAML: {error}. Fix: correct the YAML syntax at that line."
        ) from None


def read_project_name(stack_dir: Path) -> str:
    """The `name` in the stack directory's Pulumi.yaml."""
    path = stack_dir / "Pulumi.yaml"
    data = _read_yaml(
        path, f"run from a Pulumi project directory (one with Pulumi.yaml); {stack_dir} has none"
    )
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError(
            f"{path}: name = {name!r}: a Pulumi project needs a non-empty string name. "
            "Fix: add `name: <project>` to Pulumi.yaml."
        )
    return name


def engine_config(path: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """The stack file's `config:` values as the engine hands them to a program.

    Strings pass as they are; numbers, booleans, lists and objects become JSON text.
    Secret (`secure:`) values cannot be read without the stack's secrets provider,
    so gpuforge keys may not be secrets and other keys' secrets are left out.
    """
    values: dict[str, str] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise InputError(
                f"{path}: config key {key!r} is not a string. Fix: write keys as namespace:name."
            )
        if isinstance(value, dict) and set(value) == {"secure"}:
            if key.startswith(f"{NAMESPACE}:"):
                raise InputError(
                    f"{path}: {key} is a secret; gpuforge settings are not secret. "
                    f"Fix: set it in plain text with `pulumi config set {key} VALUE`."
                )
            continue
        values[key] = value if isinstance(value, str) else json.dumps(value)
    return values


def load_stack_config(stack_dir: Path, stack: str) -> StackConfig:
    """Read and validate `stack_dir/Pulumi.<stack>.yaml`; InputError (exit 2) names the file and key."""
    stack_dir = stack_dir.resolve()
    project = read_project_name(stack_dir)
    path = stack_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        shipped = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stack_dir.glob("Pulumi.*.yaml"))
        raise InputError(
            f"{path}: no such stack file. Fix: pass --stack with one of this project's stacks "
            f"({', '.join(shipped) or 'none'}), or create it with `pulumi stack init {stack}`."
        )
    data = _read_yaml(path, "pass a readable UTF-8 stack file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: a stack file is a YAML mapping with a `config:` key; it holds {type(data).__name__}. "
            "Fix: start from a shipped stack file under stacks/training/."
        )
    config = data.get("config")
    if not isinstance(config, dict):
        raise InputError(
            f"{path}: config = {config!r}: a stack file needs a `config:` mapping of namespace:key to value. "
            f"Fix: add the settings under `config:` ({DOC})."
        )
    return parse_engine_values(
        engine_config(path, config), project=project, stack=stack, stack_dir=stack_dir, source=str(path)
    )


def stack_config_from_pulumi(stack_dir: Path) -> StackConfig:
    """Validate the config the Pulumi engine gave the running program.

    Used by a stack's `__main__.py`; `stack_dir` is the folder that holds it (relative
    paths resolve there). The engine passes config through `pulumi.runtime.set_all_config`
    or the PULUMI_CONFIG environment variable; both are read so an unknown key is caught.
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    values: dict[str, str] = {str(k): str(v) for k, v in runtime_config.get_config_env().items()}
    values.update({str(k): str(v) for k, v in runtime_config.CONFIG.get().items()})
    stack = pulumi.get_stack()
    return parse_engine_values(
        values,
        project=pulumi.get_project(),
        stack=stack,
        stack_dir=stack_dir.resolve(),
        source=f"config of stack {stack} (Pulumi.{stack}.yaml)",
    )


def _decode(source: str, key: str, raw: str) -> Any:
    short = key.split(":", 1)[1]
    if _KEY_KINDS[short] == "str":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        expected = "a whole number" if short == "nodeCount" else "a mapping of keys to values"
        raise InputError(
            f"{source}: {key} = {raw!r}: expected {expected}. Fix: give {key} {expected} ({DOC})."
        ) from None


def _check_namespaces(source: str, project: str, values: Mapping[str, str]) -> None:
    for key in values:
        namespace, sep, name = key.partition(":")
        if not sep:
            raise InputError(
                f"{source}: key {key!r} has no namespace, so Pulumi reads it as {project}:{key}, "
                f"which this program never reads. Fix: write it as {NAMESPACE}:{key} ({DOC})."
            )
        if namespace == project:
            raise InputError(
                f"{source}: key {key!r} is in the project's namespace, which this program never reads. "
                f"Fix: write it as {NAMESPACE}:{name} ({DOC})."
            )
        if namespace == NAMESPACE and key not in KNOWN_KEYS:
            raise InputError(
                f"{source}: unknown key {key!r} (value {values[key]!r}). Fix: remove it or correct its "
                f"spelling; gpuforge reads {', '.join(KNOWN_KEYS)} and {REGION_KEY}."
            )


def _pydantic_error(source: str, error: ValidationError, decoded: Mapping[str, Any]) -> InputError:
    lines = []
    for detail in error.errors():
        loc = [str(part) for part in detail["loc"]]
        key = f"{NAMESPACE}:{loc[0]}" if loc else "(config)"
        field = ".".join([key, *loc[1:]])
        if detail["type"] == "missing":
            lines.append(f"  {field}: required key is missing")
        elif detail["type"] == "extra_forbidden":
            lines.append(f"  {field}: unknown key (value {detail.get('input')!r})")
        else:
            found = detail.get("input")
            if isinstance(found, Mapping) and loc and loc[0] in decoded:
                found = decoded[loc[0]]
            lines.append(f"  {field} = {found!r}: {detail['msg']}")
    return InputError(
        f"{source}: invalid gpuforge config:\n" + "\n".join(lines) + f"\nFix: correct the keys above; {DOC}."
    )


def _resolve(stack_dir: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (stack_dir / path).resolve()


def _check_zone(source: str, zone: str, region: str) -> None:
    if _ZONE_ID_PATTERN.match(zone):
        return
    if not (zone.startswith(region) and re.fullmatch(r"[a-z]", zone[len(region) :])):
        raise InputError(
            f"{source}: {NAMESPACE}:availabilityZone = {zone!r} is not a zone of aws:region {region!r}. "
            f"Fix: use a zone name such as {region}a, or a zone id such as use1-az4, in that region."
        )


def parse_engine_values(
    values: Mapping[str, str], *, project: str, stack: str, stack_dir: Path, source: str
) -> StackConfig:
    """Validate engine-form config values (key -> string) into a StackConfig."""
    _check_namespaces(source, project, values)
    region = values.get(REGION_KEY)
    if region is None or not _REGION_PATTERN.match(region):
        raise InputError(
            f"{source}: {REGION_KEY} = {region!r}: every stack needs an AWS region name. "
            f"Fix: set {REGION_KEY}, e.g. `{REGION_KEY}: us-east-1`."
        )
    decoded = {
        key.split(":", 1)[1]: _decode(source, key, raw)
        for key, raw in values.items()
        if key.startswith(f"{NAMESPACE}:")
    }
    try:
        keys = _GpuforgeKeys.model_validate(decoded)
    except ValidationError as error:
        raise _pydantic_error(source, error, decoded) from None
    _check_zone(source, keys.availabilityZone, region)
    matrix_path = _resolve(stack_dir, keys.matrix)
    if not matrix_path.is_file():
        raise InputError(
            f"{source}: {NAMESPACE}:matrix = {keys.matrix!r}: no matrix file at {matrix_path}. "
            "Fix: give the path of a matrix under images/matrices/, relative to the stack directory "
            f"{stack_dir} (e.g. ../../images/matrices/p5-h100-cuda12.yaml) or absolute."
        )
    return StackConfig(
        project=project,
        stack=stack,
        stack_dir=stack_dir,
        source=source,
        matrix_path=matrix_path,
        instance_type=keys.instanceType,
        node_count=keys.nodeCount,
        node_mode=keys.nodeMode,
        availability_zone=keys.availabilityZone,
        region=region,
        capacity=keys.capacity,
        lustre=keys.lustre,
        catalog_path=_resolve(stack_dir, keys.catalog) if keys.catalog is not None else None,
        engine_values=dict(values),
    )


__all__ = [
    "KNOWN_KEYS",
    "CapacityConfig",
    "LustreConfig",
    "StackConfig",
    "engine_config",
    "load_stack_config",
    "parse_engine_values",
    "read_project_name",
    "stack_config_from_pulumi",
]
