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
  gpuforge:availabilityZone: us-east-1a # a zone name in aws:region
  gpuforge:capacity:
    type: capacity-block                # on-demand | reservation | capacity-block
    reservationId: cr-0123456789abcdef0 # reservation and capacity-block
    placementGroup: my-cluster-pg       # reservation only, optional: the reservation's placement group
    start: "2025-07-01T11:30:00Z"       # capacity-block only, with a time zone
    end: "2025-07-15T11:30:00Z"
    upfrontFeeUsd: 12000.0            # capacity-block only, optional: the fee the purchase showed (an example)
  gpuforge:lustre:                      # optional: no key, no file system
    deploymentType: PERSISTENT_2
    storageCapacityGiB: 4800
    throughputPerTiB: 250               # PERSISTENT deployment types only
    s3Path: s3://bucket/prefix          # optional data repository association
  gpuforge:scheduler:                   # optional: no key, no scheduler (type none)
    type: slurm                         # slurm | none; slurm needs a matrix that pins slurm
    controllerInstanceType: m7i.2xlarge # a CPU type: the controller runs no jobs
    partitions:                         # optional: one `gpu` partition holding every node
      - {name: gpu, maxTime: "2-00:00:00", default: true}
  gpuforge:checkpoint:                  # optional: the checkpoint interval in plan's summary
    sizeGiB: 1043                       # one whole checkpoint, all nodes together
    writeSeconds: 95                    # optional: a measured write time to /fsx (else from Lustre)
  gpuforge:catalog: ../../images/catalog.local  # optional, relative to the stack directory
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

This module checks the keys, their types and the paths. What an instance type,
capacity type or file system allows is decided by the cluster component's own
rules (gpuforge.components.specs and cluster_rules), which run here on the config
so that a bad stack file fails before any program runs, with its file and key named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from gpuforge import checkpoint as checkpoints
from gpuforge.checkpoint import CheckpointSpec
from gpuforge.components import cluster_rules, lustre_rules
from gpuforge.components.specs import (
    AmiPin,
    CapacitySpec,
    GpuClusterSpec,
    LustreSpec,
    NetworkSpec,
    NodeMode,
    SchedulerSpec,
    check_team_quotas,
)
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import expand_user, load_yaml
from gpuforge.regions import region_problem
from gpuforge.scheduler import slurm_values
from gpuforge.subnet_limits import MAX_NODE_COUNT

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
    "scheduler": "json",
    "catalog": "str",
    "monitoring": "json",
    "checkpoint": "json",
}
KNOWN_KEYS: tuple[str, ...] = tuple(f"{NAMESPACE}:{key}" for key in _KEY_KINDS)

DOC = "the gpuforge:* keys are listed in gpuforge/stack_config.py and the README ('Stacks')"

_T = TypeVar("_T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class _CapacityKeys(_Strict):
    """`gpuforge:capacity` as written; the rules are CapacitySpec's."""

    type: StrictStr
    reservation_id: StrictStr | None = Field(default=None, alias="reservationId")
    placement_group: StrictStr | None = Field(default=None, alias="placementGroup")
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None
    upfront_fee_usd: StrictFloat | None = Field(default=None, alias="upfrontFeeUsd")

    @field_validator("start", "end", mode="before")
    @classmethod
    def _iso_8601_only(cls, value: object) -> object:
        """Only ISO 8601 text with a zone: pydantic would read a bare number as Unix seconds (or ms), which a
        person may have meant in another unit or zone; a Capacity Block's times are for people to check."""
        if value is None:
            return value
        if not isinstance(value, str) or re.fullmatch(r"[0-9.+-]+", value.strip()):
            raise ValueError(
                "a bare number is ambiguous (Unix seconds? milliseconds?); write an ISO 8601 time with its "
                "zone, as AWS shows the block's StartDate and EndDate, e.g. 2026-01-01T11:30:00Z"
            )
        return value


class _LustreKeys(_Strict):
    """`gpuforge:lustre` as written; the rules are LustreSpec's."""

    deployment_type: StrictStr = Field(alias="deploymentType")
    storage_capacity_gib: StrictInt = Field(alias="storageCapacityGiB")
    throughput_per_tib: StrictInt | None = Field(default=None, alias="throughputPerTiB")
    s3_path: StrictStr | None = Field(default=None, alias="s3Path")


def _stack_lustre(keys: _LustreKeys) -> LustreSpec:
    """The stack's file system, which a stack links to the cluster's bucket only through a DRA (the
    config has no legacy import/export keys), so a type that cannot take a DRA is refused here."""
    spec = LustreSpec(**keys.model_dump())
    lustre_rules.check_cluster_link(spec, has_bucket=True)
    return spec


class _CheckpointKeys(_Strict):
    """`gpuforge:checkpoint` as written; the rules are gpuforge.checkpoint's."""

    size_gib: StrictFloat = Field(alias="sizeGiB", gt=0, allow_inf_nan=False)
    write_seconds: StrictFloat | None = Field(default=None, alias="writeSeconds", gt=0, allow_inf_nan=False)


class _PartitionKeys(_Strict):
    """One entry of `gpuforge:scheduler.partitions` as written; the rules are PartitionSpec's."""

    name: StrictStr
    max_time: StrictStr | None = Field(default=None, alias="maxTime")
    default: StrictBool = False


class _AccountingKeys(_Strict):
    """`gpuforge:scheduler.accounting` as written; the rules are AccountingSpec's."""

    database: StrictStr = "local"


class _QosKeys(_Strict):
    """One entry of `gpuforge:scheduler.qos` as written; the rules are QosSpec's."""

    name: StrictStr
    priority: StrictInt
    preempts: list[StrictStr] = Field(default_factory=list)
    grace_period: StrictInt | None = Field(default=None, alias="gracePeriod")

    @field_validator("grace_period", mode="before")
    @classmethod
    def _whole_seconds(cls, value: object) -> object:
        """Seconds as a YAML whole number: "5m", "300" or 5.5 would be read in some unit or rounded."""
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(
                "a grace period is whole seconds, written as a number (e.g. 300 for five minutes)"
            )
        return value


class _TeamUserKeys(_Strict):
    """A user of a team written as {name, default}; a bare name is the same with default false."""

    name: StrictStr
    default: StrictBool = False


class _TeamKeys(_Strict):
    """One entry of `gpuforge:scheduler.teams` as written; the rules are TeamSpec's."""

    name: StrictStr
    users: list[StrictStr | _TeamUserKeys]
    gpu_quota: StrictInt = Field(alias="gpuQuota")
    qos: StrictStr | list[StrictStr] = Field(default_factory=list)


class _SchedulerKeys(_Strict):
    """`gpuforge:scheduler` as written; the rules are SchedulerSpec's."""

    type: StrictStr
    controller_instance_type: StrictStr | None = Field(default=None, alias="controllerInstanceType")
    partitions: list[_PartitionKeys] = Field(default_factory=list)
    accounting: _AccountingKeys | None = None
    qos: list[_QosKeys] = Field(default_factory=list)
    teams: list[_TeamKeys] = Field(default_factory=list)
    kubernetes_version: StrictStr | None = Field(default=None, alias="kubernetesVersion")
    system_node_type: StrictStr | None = Field(default=None, alias="systemNodeType")
    admin_role_arn: StrictStr | None = Field(default=None, alias="adminRoleArn")
    # `gpuforge validate`'s container on a Kubernetes stack (StackConfig.acceptance_image), not the cluster's.
    acceptance_image: StrictStr | None = Field(default=None, alias="acceptanceImage")

    def spec(self) -> SchedulerSpec:
        """The SchedulerSpec of these keys; a key left out stays unset, so `type: none` refuses only what was written."""
        dumped = self.model_dump(exclude_unset=True, exclude_none=True, exclude={"acceptance_image"})
        return SchedulerSpec(**dumped)


class _GpuforgeKeys(_Strict):
    """The `gpuforge:` keys as decoded values; field names are the keys without namespace."""

    matrix: StrictStr = Field(min_length=1)
    instanceType: StrictStr = Field(min_length=1)  # the field names are the config keys
    nodeCount: StrictInt = Field(ge=1, le=MAX_NODE_COUNT)  # what one subnet can hold
    nodeMode: NodeMode
    availabilityZone: StrictStr = Field(min_length=1)
    capacity: _CapacityKeys
    lustre: _LustreKeys | None = None
    scheduler: _SchedulerKeys | None = None
    catalog: StrictStr | None = Field(default=None, min_length=1)
    # Read by gpuforge.monitoring.config, which needs the rest of the stack (its scheduler, its region).
    monitoring: Any = None
    checkpoint: _CheckpointKeys | None = None


class StackConfig(BaseModel):
    """One stack's validated settings; paths are absolute.

    `capacity`, `lustre` and `scheduler` are the cluster component's own specs, so every
    rule they carry (reservation ids, Capacity Block dates, Lustre sizes and throughput,
    partition names) has already been checked. `slurm_version` is the matrix's
    `slurm.version` when the scheduler is Slurm (None otherwise): the Slurm the image
    carries, for which the cluster's Slurm config is rendered.
    """

    model_config = ConfigDict(frozen=True)

    project: str
    stack: str
    stack_dir: Path
    source: str  # where the values came from, for messages
    matrix_path: Path
    instance_type: str
    node_count: int
    node_mode: NodeMode
    availability_zone: str
    region: str
    capacity: CapacitySpec
    lustre: LustreSpec | None
    scheduler: SchedulerSpec
    slurm_version: str | None
    catalog_path: Path | None  # None: the default catalog (gpuforge.images.catalog.DEFAULT_CATALOG)
    engine_values: dict[str, str]  # every config key as the engine hands it to the program
    checkpoint: CheckpointSpec | None = None  # gpuforge:checkpoint; checked against the published MTBF
    # gpuforge:scheduler.acceptanceImage: REPOSITORY@sha256:<64 hex>, what `gpuforge validate` runs without --image.
    acceptance_image: str | None = None


def _read_yaml(path: Path, what: str, fix: str) -> Any:
    """A stack's YAML file through gpuforge.loading; timestamps stay text, as the Pulumi CLI hands them."""
    return load_yaml(path, what=what, fix=fix, timestamps_as_text=True)


def read_project_name(stack_dir: Path) -> str:
    """The `name` in the stack directory's Pulumi.yaml."""
    path = stack_dir / "Pulumi.yaml"
    data = _read_yaml(
        path,
        "Pulumi project file",
        f"run from a Pulumi project directory (one with a readable Pulumi.yaml); {stack_dir} has none",
    )
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError(
            f"{path}: name = {cut(name)}: a Pulumi project needs a non-empty string name. "
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
                f"{path}: config key {cut(key)} is not a string. Fix: write keys as namespace:name."
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
    # Before the name becomes a file name: a name the rule refuses may be one no file system takes.
    _check_stack_name(str(stack_dir), stack)
    path = stack_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        shipped = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stack_dir.glob("Pulumi.*.yaml"))
        raise InputError(
            f"{path}: no such stack file. Fix: pass --stack with one of this project's stacks "
            f"({', '.join(shipped) or 'none'}), or create it with `pulumi stack init {stack}`."
        )
    data = _read_yaml(
        path, "stack file", "pass a readable UTF-8 stack file (start from one under stacks/training/)"
    )
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
            f"{path}: config = {cut(config)}: a stack file needs a `config:` mapping of namespace:key to value. "
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
            f"{source}: {key} = {cut(raw)}: expected {expected}. Fix: give {key} {expected} ({DOC})."
        ) from None


def _check_namespaces(source: str, project: str, values: Mapping[str, str]) -> None:
    for key in values:
        namespace, sep, name = key.partition(":")
        if not sep:
            raise InputError(
                f"{source}: key {cut(key)} has no namespace, so Pulumi reads it as {project}:{key}, "
                f"which this program never reads. Fix: write it as {NAMESPACE}:{key} ({DOC})."
            )
        if namespace == project:
            raise InputError(
                f"{source}: key {cut(key)} is in the project's namespace, which this program never reads. "
                f"Fix: write it as {NAMESPACE}:{name} ({DOC})."
            )
        if namespace == NAMESPACE and key not in KNOWN_KEYS:
            raise InputError(
                f"{source}: unknown key {cut(key)} (value {cut(values[key])}). Fix: remove it or correct its "
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
            lines.append(f"  {field}: unknown key (value {cut(detail.get('input'))})")
        else:
            found = detail.get("input")
            if isinstance(found, Mapping) and loc and loc[0] in decoded:
                found = decoded[loc[0]]
            lines.append(f"  {field} = {cut(found)}: {detail['msg']}")
    return InputError(
        f"{source}: invalid gpuforge config:\n" + "\n".join(lines) + f"\nFix: correct the keys above; {DOC}."
    )


# Linux's PATH_MAX and NAME_MAX: a longer path, or a longer name in it, fails every system call.
_PATH_MAX = 4096
_NAME_MAX = 255


def _resolve(source: str, key: str, stack_dir: Path, value: str) -> Path:
    """The path a config key names, absolute; a path no system call could take is an InputError."""
    problem = None
    if any(not ch.isprintable() for ch in value):
        problem = "holds a control character (a NUL byte, a newline or an escape)"
    elif len(value.encode("utf-8")) >= _PATH_MAX:
        problem = f"is longer than a path may be ({_PATH_MAX} bytes)"
    elif any(len(part.encode("utf-8")) > _NAME_MAX for part in value.split("/")):
        problem = f"has a name longer than a file name may be ({_NAME_MAX} bytes)"
    if problem is not None:
        raise InputError(
            f"{source}: {NAMESPACE}:{key} = {cut(value)} {problem}. "
            f"Fix: give the path of a file, relative to the stack directory {stack_dir} or absolute."
        )
    path = expand_user(Path(value), what=f"{source}: {NAMESPACE}:{key}")
    return path if path.is_absolute() else (stack_dir / path).resolve()


def _config_field_names() -> dict[str, str]:
    """Component field names (as their errors spell them) -> the config keys a user wrote."""
    names: dict[str, str] = {}
    for key, model, spec in (
        ("capacity", _CapacityKeys, "CapacitySpec"),
        ("lustre", _LustreKeys, "LustreSpec"),
        ("scheduler", _SchedulerKeys, "SchedulerSpec"),
        ("scheduler.partitions", _PartitionKeys, "PartitionSpec"),
        ("scheduler.accounting", _AccountingKeys, "AccountingSpec"),
        ("scheduler.qos", _QosKeys, "QosSpec"),
        ("scheduler.teams", _TeamKeys, "TeamSpec"),
    ):
        for field, info in model.model_fields.items():
            alias = info.alias or field
            written = f"{NAMESPACE}:{key}.{alias}"
            names[f"{spec}.{field}"] = written
            names[f"{key}.{field}"] = written
            if key.startswith("scheduler"):
                # SchedulerSpec's messages spell the keys as written (scheduler.controllerInstanceType).
                names[f"{key}.{alias}"] = written
    # PartitionSpec names its fields without the block (partitions.name, partitions.maxTime); QosSpec,
    # TeamSpec and TeamUser likewise (qos.name, teams.name, teams.users.name).
    for block, model in (("partitions", _PartitionKeys), ("qos", _QosKeys), ("teams", _TeamKeys)):
        for field, info in model.model_fields.items():
            names[f"{block}.{info.alias or field}"] = f"{NAMESPACE}:scheduler.{block}.{info.alias or field}"
    names["teams.users.name"] = f"{NAMESPACE}:scheduler.teams.users.name"
    for field, key in (
        ("instance_type", "instanceType"),
        ("node_count", "nodeCount"),
        ("node_mode", "nodeMode"),
        ("availability_zone", "availabilityZone"),
    ):
        names[f"GpuClusterSpec.{field}"] = names[field] = f"{NAMESPACE}:{key}"
    return names


_FIELD_NAMES = _config_field_names()
# Whole names only: not inside a longer identifier or dotted path.
_FIELD_PATTERN = re.compile(
    r"(?<![\w.:])(?:"
    + "|".join(re.escape(name) for name in sorted(_FIELD_NAMES, key=len, reverse=True))
    + r")(?![\w])"
)


def _component_rule(source: str, where: str, check: Callable[[], _T]) -> _T:
    """Run one of the cluster component's rules; its error is re-worded with the file and config key.

    `where` names the config key when the component's message does not name one itself.
    """
    try:
        return check()
    except InputError as error:
        message = _FIELD_PATTERN.sub(lambda match: _FIELD_NAMES[match.group(0)], error.message)
        prefix = source if f"{NAMESPACE}:" in message else f"{source}: {where}"
        raise InputError(f"{prefix}: {message}") from None


def _check_stack_name(source: str, stack: str) -> None:
    """The stack name is the cluster's name (`cluster_spec`), and so Slurm's ClusterName: the one
    rule of both, checked before anything is built, so `plan` and `scheduler render` agree."""
    problem = slurm_values.CLUSTER_NAME.problem(stack)
    if problem is not None:
        raise InputError(
            f"{source}: stack name {cut(stack)}: the cluster is named after its stack, and "
            f"{problem}. Fix: use a stack whose name keeps to that rule (`pulumi stack init NAME`, "
            f"or `pulumi stack rename NAME`). (source: {slurm_values.CLUSTER_NAME.source})"
        )


def parse_engine_values(
    values: Mapping[str, str], *, project: str, stack: str, stack_dir: Path, source: str
) -> StackConfig:
    """Validate engine-form config values (key -> string) into a StackConfig."""
    _check_namespaces(source, project, values)
    region = values.get(REGION_KEY)
    if region is None or not slurm_values.REGION.ok(region):
        raise InputError(
            f"{source}: {REGION_KEY} = {cut(region)}: every stack needs an AWS region name "
            f"({slurm_values.REGION.rule}). Fix: set {REGION_KEY}, e.g. `{REGION_KEY}: us-east-1`."
        )
    problem = region_problem(region)
    if problem is not None:
        raise InputError(f"{source}: {REGION_KEY} = {problem}.")
    _check_stack_name(source, stack)
    decoded = {
        key.split(":", 1)[1]: _decode(source, key, raw)
        for key, raw in values.items()
        if key.startswith(f"{NAMESPACE}:")
    }
    try:
        keys = _GpuforgeKeys.model_validate(decoded)
    except ValidationError as error:
        raise _pydantic_error(source, error, decoded) from None
    matrix_path = _resolve(source, "matrix", stack_dir, keys.matrix)
    if not matrix_path.is_file():
        raise InputError(
            f"{source}: {NAMESPACE}:matrix = {cut(keys.matrix)}: no matrix file at {matrix_path}. "
            "Fix: give the path of a matrix under images/matrices/, relative to the stack directory "
            f"{stack_dir} (e.g. ../../images/matrices/p5-h100-cuda12.yaml) or absolute."
        )
    instance = _component_rule(
        source, f"{NAMESPACE}:instanceType", lambda: cluster_rules.instance_type(keys.instanceType)
    )
    _component_rule(
        source,
        "availabilityZone",
        lambda: cluster_rules.check_availability_zone(keys.availabilityZone, region, "aws:region"),
    )
    capacity = _component_rule(
        source, f"{NAMESPACE}:capacity", lambda: CapacitySpec(**keys.capacity.model_dump())
    )
    _component_rule(
        source, f"{NAMESPACE}:nodeMode", lambda: cluster_rules.check_node_mode(keys.nodeMode, capacity)
    )
    lustre_keys = keys.lustre
    lustre = (
        None
        if lustre_keys is None
        else _component_rule(source, f"{NAMESPACE}:lustre", lambda: _stack_lustre(lustre_keys))
    )
    scheduler_keys = keys.scheduler
    scheduler = (
        SchedulerSpec(type="none")
        if scheduler_keys is None
        else _component_rule(source, f"{NAMESPACE}:scheduler", scheduler_keys.spec)
    )
    _component_rule(
        source,
        f"{NAMESPACE}:scheduler.teams",
        lambda: check_team_quotas(scheduler, node_count=keys.nodeCount, gpus_per_node=instance.gpu_count),
    )
    # Stacks launch into the VPC gpuforge creates with its default block (NetworkSpec's).
    _component_rule(
        source,
        f"{NAMESPACE}:nodeCount",
        lambda: cluster_rules.check_subnet_addresses(
            instance,
            keys.nodeCount,
            cluster_rules.private_subnet_block(NetworkSpec().vpc_cidr),
            controllers=1 if scheduler.type == "slurm" else 0,
        ),
    )
    slurm_version = _slurm_version(source, matrix_path) if scheduler.type == "slurm" else None
    if scheduler.type == "kubernetes":
        _check_kubernetes_version(source, matrix_path, scheduler.kubernetes_version)
    checkpoint = None if keys.checkpoint is None else CheckpointSpec(**keys.checkpoint.model_dump())
    if checkpoint is not None:
        # At plan time the cluster has no failure history yet: the published figure, a job on every node.
        _component_rule(
            source,
            f"{NAMESPACE}:checkpoint",
            lambda: checkpoints.check(checkpoint, lustre, keys.nodeCount, checkpoints.published()),
        )
    config = StackConfig(
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
        capacity=capacity,
        lustre=lustre,
        scheduler=scheduler,
        slurm_version=slurm_version,
        catalog_path=_resolve(source, "catalog", stack_dir, keys.catalog)
        if keys.catalog is not None
        else None,
        engine_values=dict(values),
        checkpoint=checkpoint,
        acceptance_image=_acceptance_image(source, scheduler.type, scheduler_keys),
    )
    # The monitoring block is checked with the rest, so plan, render and `pulumi up` refuse the same
    # block `monitoring render` refuses. Imported here: gpuforge.monitoring.config builds on this module.
    from gpuforge.monitoring.config import parse_monitoring

    parse_monitoring(values.get(f"{NAMESPACE}:monitoring"), config)
    return config


def _slurm_version(source: str, matrix_path: Path) -> str | None:
    """The Slurm a `type: slurm` cluster runs: the matrix's `slurm.version`; an error if it pins none.

    A matrix whose shape is invalid gives None here: `resolve_ami` then reports all of its
    findings, before any cluster is built.
    """
    from gpuforge.images.matrix import Matrix, read_yaml

    try:
        matrix = Matrix.model_validate(read_yaml(matrix_path))
    except ValidationError:
        return None
    if matrix.slurm is None:
        raise InputError(
            f"{source}: {NAMESPACE}:scheduler.type = 'slurm', but {NAMESPACE}:matrix {display_path(matrix_path)} "
            "pins no Slurm (it has no `slurm:` block), so its image has neither slurmctld nor slurmd. Fix: add "
            "`slurm: {version, sha256, url}` and `pmix: {version, sha256, url}` to the matrix (as "
            "images/matrices/p5-h100-cuda12.yaml does) and build its image again, or set "
            f"{NAMESPACE}:scheduler.type: none."
        )
    return matrix.slurm.version


def _acceptance_image(source: str, scheduler_type: str, keys: _SchedulerKeys | None) -> str | None:
    """`gpuforge:scheduler.acceptanceImage`: a Kubernetes stack's acceptance container, by digest only.

    The rule is `gpuforge validate --image`'s (gpuforge.validate.kubernetes_jobs.image_from_reference), checked
    here so that a tag is refused when the stack is planned, not when the acceptance runs.
    """
    from gpuforge.validate.kubernetes_jobs import image_from_reference

    key = f"{NAMESPACE}:scheduler.acceptanceImage"
    value = None if keys is None else keys.acceptance_image
    if value is None:
        return None
    if scheduler_type != "kubernetes":
        raise InputError(
            f"{source}: {key} = {cut(value)}, but scheduler.type is {scheduler_type!r}: only the acceptance on a "
            "Kubernetes stack runs in a container. Fix: remove the key."
        )
    try:
        image_from_reference(value)
    except InputError:
        raise InputError(
            f"{source}: {key} = {cut(value)}: the acceptance image must be pinned by digest (rule: "
            "REPOSITORY@sha256:<64 hex>; a tag can point at another image tomorrow). Fix: write the digest the "
            "CI job printed after pushing it (`gpuforge image acceptance-container`), or take it with "
            "`crane digest REPOSITORY:TAG`."
        ) from None
    return value


def _check_kubernetes_version(source: str, matrix_path: Path, stack_version: str | None) -> None:
    """A `type: kubernetes` cluster's control plane runs the matrix's `kubernetes.version`.

    The image is built per Kubernetes minor (as EKS AMIs are) and `matrix check` judged its kubelet's
    version skew and EKS support against that minor, so a stack naming another one would join nodes
    to a control plane nobody checked them against. An invalid matrix is left to `resolve_ami`.
    """
    from gpuforge.images.matrix import Matrix, read_yaml

    try:
        matrix = Matrix.model_validate(read_yaml(matrix_path))
    except ValidationError:
        return
    where = f"{NAMESPACE}:matrix {display_path(matrix_path)}"
    if matrix.kubernetes is None:
        raise InputError(
            f"{source}: {NAMESPACE}:scheduler.type = 'kubernetes', but {where} pins no Kubernetes node parts (it "
            "has no `kubernetes:` block), so its image has no kubelet or containerd to join the cluster. Fix: "
            "use a matrix with a `kubernetes:` block (as images/matrices/p5-h100-cuda12.yaml has) or add one "
            f"and build its image again, or set {NAMESPACE}:scheduler.type: slurm."
        )
    if stack_version != matrix.kubernetes.version:
        raise InputError(
            f"{source}: {NAMESPACE}:scheduler.kubernetesVersion = {cut(stack_version)}, but {where} pins "
            f"kubernetes.version {matrix.kubernetes.version!r}: its image's kubelet "
            f"{matrix.kubernetes.kubelet.version} was built and checked for that control plane only. Fix: set "
            f'kubernetesVersion: "{matrix.kubernetes.version}", or change the matrix\'s kubernetes block '
            "(version and kubelet), run `gpuforge matrix check` and build its image again."
        )


def cluster_spec(config: StackConfig, ami: AmiPin) -> GpuClusterSpec:
    """The GpuCluster spec of a stack: its config plus the AMI resolved for it.

    The cluster is named after the stack, so each stack's resources have distinct names. Stacks get the VPC
    gpuforge makes; with scheduler type kubernetes its nodes reach the internet through a NAT gateway, because
    the add-on images come from registries outside AWS (components.eks_network.check_image_pulls).
    """
    return _component_rule(
        config.source,
        f"the cluster of stack {config.stack!r} (named after the stack)",
        lambda: GpuClusterSpec(
            name=config.stack,
            instance_type=config.instance_type,
            node_count=config.node_count,
            node_mode=config.node_mode,
            availability_zone=config.availability_zone,
            ami=ami,
            capacity=config.capacity,
            lustre=config.lustre,
            scheduler=config.scheduler,
            network=NetworkSpec(api_access="nat" if config.scheduler.type == "kubernetes" else "endpoints"),
        ),
    )


def resolve_ami(config: StackConfig) -> AmiPin:
    """The AMI built from the stack's matrix for its region, from the image catalog.

    The catalog is `gpuforge:catalog` or the default one. There is no fallback: a
    matrix with no entry for the region is an error that names the command building it.
    """
    from gpuforge.images.catalog import DEFAULT_CATALOG, LOCAL_CATALOG, read_catalog
    from gpuforge.images.matrix import MatrixInvalid, load_valid

    try:
        matrix, digest = load_valid(config.matrix_path)
    except MatrixInvalid as error:
        raise InputError(
            f"{config.source}: {NAMESPACE}:matrix = {str(config.matrix_path)!r} is not a valid matrix, so no AMI "
            f"can be pinned for it: {error.message}"
        ) from None
    if config.instance_type not in matrix.targets:
        raise InputError(
            f"{config.source}: {NAMESPACE}:instanceType = {config.instance_type!r} is not a target of "
            f"{NAMESPACE}:matrix {display_path(config.matrix_path)} (targets: {', '.join(matrix.targets)}); its "
            "kernel, driver and libraries were checked for those types only. Fix: choose a matrix whose "
            "targets include the instance type, or add the type to the matrix's targets and check it again."
        )
    catalog_path = config.catalog_path or DEFAULT_CATALOG
    entry = read_catalog(catalog_path, given_by=f"{NAMESPACE}:catalog or --catalog").lookup(
        digest, config.region
    )
    if entry is None:
        local = catalog_path.resolve() == LOCAL_CATALOG.resolve()
        command = f"gpuforge image build {display_path(config.matrix_path)} --region {config.region}"
        raise InputError(
            f"{config.source}: the image catalog {display_path(catalog_path)} has no AMI for matrix {matrix.name} "
            f"{matrix.version} ({config.matrix_path}, digest {digest}) in region {config.region}. "
            f"Fix: build it with `{command}{' --local' if local else ''}`"
            + (
                ""
                if local
                else f" (or `{command} --local` against the local emulator, then plan with "
                f"--catalog {display_path(LOCAL_CATALOG)})"
            )
            + ", then run again."
        )
    return AmiPin(
        ami_id=entry.ami_id,
        region=config.region,
        matrix_name=matrix.name,
        matrix_version=matrix.version,
        matrix_digest=digest,
    )


def display_path(path: Path) -> str:
    """`path` relative to the working directory where it lies under it, else absolute: for messages and commands to copy."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
