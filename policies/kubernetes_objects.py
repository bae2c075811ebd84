"""What a Kubernetes object makes: the objects inside it and where their pods are, for every Kubernetes rule.

The rules judge pods (their images, GPU requests, tolerations). A pod is created from a pod spec that sits at a
fixed path in each workload kind, and an object can carry other objects. So that no pod goes unseen, every rule
reads objects through this one module:

- `members` yields the object and every object it carries, as `kubectl apply -f` would create them: the items of
  a List (any object with `items`, nested Lists flattened) and the components of an AppWrapper;
- `pod_specs` yields every pod spec of them, at the paths each kind's API gives (`WORKLOADS`, sources beside
  each entry);
- `unreadable` names what makes an object one the API server would refuse (a List item without a kind, a
  `containers` that is not a list): a rule cannot read it, so it is reported, never skipped;
- `unchecked_workloads` names each object whose pods cannot be judged here: a kind known to make pods from
  other objects (TrainJob), or a kind not in `WORKLOADS` that carries a pod spec, names a container image or
  requests GPUs. Those are reported too (the mandatory kubernetes-workload-checked rule), since a check that
  passes what it did not read is a false pass.

Objects are read through `props.at`, which serves plain dicts and the policy engine's proxies alike; a value
unknown during `pulumi preview` stops the rule with the engine's advisory "can't run during preview".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuforge.policies.engine_adapter import MISSING, UNKNOWN, elements, unknown_during_preview
from gpuforge.policies.props import at

GPU_RESOURCE: Final = "nvidia.com/gpu"
# Kueue adds its ResourceFlavor's tolerations (gpuforge's flavor carries the GPU taint's) to the pods of a
# workload it admits: https://kueue.sigs.k8s.io/docs/concepts/resource_flavor/ (ResourceFlavor tolerations).
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
CONTAINER_LISTS: Final = ("containers", "initContainers", "ephemeralContainers")
# Lists inside Lists and objects inside AppWrappers, at most this deep: kubectl flattens nested Lists without a
# bound, a check must have one. The YAML loader's own depth cap (gpuforge.loading.MAX_DEPTH) is far above it.
MAX_NESTING: Final = 8
# How deep the search for pods in an unknown kind goes (a bound on the walk, as the loader's on the file).
_MAX_SEARCH_DEPTH: Final = 64


@dataclass(frozen=True, order=True)
class ObjectType:
    """An object's API group ("" for the core group) and kind: `Job` of `batch` is not `Job` of another group."""

    group: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.group or 'core'} API group)"


def parse_api_version(api_version: str) -> str | None:
    """The group of `apiVersion` (`batch/v1` -> batch, `v1` -> the core group ""), or None if it is not one."""
    group, slash, version = api_version.rpartition("/")
    if not version or "/" in group or (slash and not group) or any(ch.isspace() for ch in api_version):
        return None
    return group


def type_of(api_version: str, kind: str) -> ObjectType | None:
    """The type an object's `apiVersion` and `kind` name, or None when `apiVersion` is not `[group/]version`."""
    group = parse_api_version(api_version)
    return None if group is None or not kind else ObjectType(group, kind)


# pulumi-kubernetes resources that are not objects: their children are registered as resources of their own and
# checked there (ConfigGroup, ConfigFile, Chart v2/v3/v4, Directory: the v2/v3 Chart renders its template in the
# SDK and registers each object), or the chart is rendered by the provider and its objects are not seen at all
# (helm.sh/v3 Release). Tokens from the SDK: github.com/pulumi/pulumi-kubernetes,
# sdk/python/pulumi_kubernetes/{yaml,helm,kustomize} at v4.32.0 (a03ff6ba58d2f1ea68319dda4b2c982119489c71).
PULUMI_COMPONENTS: Final = frozenset(
    {
        "kubernetes:yaml:ConfigFile",
        "kubernetes:yaml:ConfigGroup",
        "kubernetes:yaml/v2:ConfigFile",
        "kubernetes:yaml/v2:ConfigGroup",
        "kubernetes:helm.sh/v2:Chart",
        "kubernetes:helm.sh/v3:Chart",
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v4:Chart",
        "kubernetes:kustomize:Directory",
        "kubernetes:kustomize/v2:Directory",
    }
)


def type_of_token(resource_type: str) -> ObjectType | None:
    """The object type of a pulumi-kubernetes resource, `kubernetes:<group/version>:<Kind>` (core objects as
    `core/v1`); None for other providers and for `PULUMI_COMPONENTS`.

    A `<Kind>Patch` resource (`kubernetes:apps/v1:DeploymentPatch`) changes an existing object by server-side
    apply (pulumi-kubernetes v4.32.0, sdk/python/pulumi_kubernetes/apps/v1/DeploymentPatch.py): the fields it
    sets are that kind's, so it is read as one (an image it sets is what the pods will run)."""
    provider, _, rest = resource_type.partition(":")
    if provider != "kubernetes" or resource_type in PULUMI_COMPONENTS:
        return None
    api_version, colon, kind = rest.rpartition(":")
    if not colon:
        return None
    group = parse_api_version(api_version)
    if group is None:
        return None
    if kind.endswith("Patch") and len(kind) > len("Patch"):
        kind = kind.removesuffix("Patch")
    return ObjectType("" if group == "core" else group, kind)


Steps = tuple[str, ...]
"""A path into an object: field names, "*" for every element of a list, "{}" for every value of a mapping."""


@dataclass(frozen=True)
class Workload:
    """Where a kind keeps what it makes. `source` is the API reference or CRD source that gives the paths."""

    pods: tuple[Steps, ...]
    source: str
    images: tuple[Steps, ...] = ()
    """Container images it names outside its pod specs (sidecars its controller adds)."""
    objects: tuple[Steps, ...] = ()
    """Whole objects it carries, each made as an object of its own (and checked as one)."""


_TEMPLATE: Final = ("template", "spec")
_K8S_API = "https://github.com/kubernetes/api at v0.35.0 (9afe7de0a56c582b06ca094f7309015bc84657a7)"
_CORE_POD = Workload((("spec",),), f"{_K8S_API}, core/v1/types.go: Pod.Spec")
_APPS = Workload(
    (("spec", *_TEMPLATE),),
    f"{_K8S_API}, apps/v1/types.go: {{Deployment,StatefulSet,DaemonSet,ReplicaSet}}Spec.Template "
    "(extensions/v1beta1 had the same layout)",
)
_JOB_PODS: Final = ("spec", *_TEMPLATE)
_RAY = "https://github.com/ray-project/kuberay at v1.7.0 (59d663aeec13760646da3db9c1cf8cfe883e30b7)"
_KUBEFLOW = (
    "https://github.com/kubeflow/training-operator at v1.9.0 (6f74c7f6b2ed6c27aabd82d0a316b23f0646059c), "
    "pkg/apis/kubeflow.org/v1/*_types.go: <Kind>Spec.<replicaSpecs> map[ReplicaType]*ReplicaSpec, "
    "common_types.go ReplicaSpec.Template"
)


def _ray_cluster(prefix: Steps) -> tuple[tuple[Steps, ...], tuple[Steps, ...]]:
    """A RayClusterSpec at `prefix`: its pod templates, and the sidecar images it may name."""
    pods = ((*prefix, "headGroupSpec", *_TEMPLATE), (*prefix, "workerGroupSpecs", "*", *_TEMPLATE))
    images = (
        (*prefix, "autoscalerOptions", "image"),
        (*prefix, "historyServerOptions", "collectorOptions", "image"),
    )
    return pods, images


_RAY_CLUSTER_PODS, _RAY_CLUSTER_IMAGES = _ray_cluster(("spec",))
_RAY_JOB_PODS, _RAY_JOB_IMAGES = _ray_cluster(("spec", "rayClusterSpec"))
_RAY_SERVICE_PODS, _RAY_SERVICE_IMAGES = _ray_cluster(("spec", "rayClusterConfig"))
_TRAINING_RUNTIME = Workload(
    (("spec", "template", "spec", "replicatedJobs", "*", "template", "spec", *_TEMPLATE),),
    "https://github.com/kubeflow/trainer at v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab), "
    "pkg/apis/trainer/v1alpha1/trainingruntime_types.go: TrainingRuntimeSpec.Template (JobSetTemplateSpec), "
    "whose spec is a JobSetSpec",
)

WORKLOADS: Final[dict[ObjectType, Workload]] = {
    ObjectType("", "Pod"): _CORE_POD,
    ObjectType("", "PodTemplate"): Workload(
        (_TEMPLATE,), f"{_K8S_API}, core/v1/types.go: PodTemplate.Template"
    ),
    ObjectType("", "ReplicationController"): Workload(
        (("spec", *_TEMPLATE),), f"{_K8S_API}, core/v1/types.go: ReplicationControllerSpec.Template"
    ),
    **{
        ObjectType(group, kind): _APPS
        for group in ("apps", "extensions")
        for kind in ("Deployment", "DaemonSet", "ReplicaSet")
    },
    ObjectType("apps", "StatefulSet"): _APPS,
    ObjectType("batch", "Job"): Workload((_JOB_PODS,), f"{_K8S_API}, batch/v1/types.go: JobSpec.Template"),
    ObjectType("batch", "CronJob"): Workload(
        (("spec", "jobTemplate", *_JOB_PODS),),
        f"{_K8S_API}, batch/v1/types.go: CronJobSpec.JobTemplate (JobTemplateSpec), whose Spec is a JobSpec",
    ),
    ObjectType("jobset.x-k8s.io", "JobSet"): Workload(
        (("spec", "replicatedJobs", "*", "template", *_JOB_PODS),),
        "https://github.com/kubernetes-sigs/jobset at v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77), "
        "api/jobset/v1alpha2/jobset_types.go: JobSetSpec.ReplicatedJobs, ReplicatedJob.Template (JobTemplateSpec)",
    ),
    ObjectType("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): Workload(
        (
            ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
            ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"),
        ),
        "https://github.com/kubernetes-sigs/lws at v0.10.0 (2161f38ff333f9e24d3c44adef7cd5d9787cac00), "
        "api/leaderworkerset/v1/leaderworkerset_types.go: LeaderWorkerTemplate.{LeaderTemplate,WorkerTemplate}",
    ),
    ObjectType("ray.io", "RayCluster"): Workload(
        _RAY_CLUSTER_PODS,
        f"{_RAY}, ray-operator/apis/ray/v1/raycluster_types.go: RayClusterSpec.{{HeadGroupSpec,WorkerGroupSpecs}}"
        ".Template; AutoscalerOptions.Image and HistoryServerOptions.CollectorOptions.Image name sidecar images",
        _RAY_CLUSTER_IMAGES,
    ),
    ObjectType("ray.io", "RayJob"): Workload(
        (*_RAY_JOB_PODS, ("spec", "submitterPodTemplate", "spec")),
        f"{_RAY}, ray-operator/apis/ray/v1/rayjob_types.go: RayJobSpec.RayClusterSpec, .SubmitterPodTemplate",
        _RAY_JOB_IMAGES,
    ),
    ObjectType("ray.io", "RayService"): Workload(
        _RAY_SERVICE_PODS,
        f"{_RAY}, ray-operator/apis/ray/v1/rayservice_types.go: RayServiceSpec.RayClusterSpec (json rayClusterConfig)",
        _RAY_SERVICE_IMAGES,
    ),
    **{
        ObjectType("kubeflow.org", kind): Workload((("spec", field, "{}", *_TEMPLATE),), _KUBEFLOW)
        for kind, field in (
            ("PyTorchJob", "pytorchReplicaSpecs"),
            ("TFJob", "tfReplicaSpecs"),
            ("XGBoostJob", "xgbReplicaSpecs"),
            ("PaddleJob", "paddleReplicaSpecs"),
            ("JAXJob", "jaxReplicaSpecs"),
        )
    },
    ObjectType("kubeflow.org", "MPIJob"): Workload(
        (("spec", "mpiReplicaSpecs", "{}", *_TEMPLATE),),
        "https://github.com/kubeflow/mpi-operator at v0.8.0 (101db144e019e1de65aaded07745e9d805c2852a), "
        "pkg/apis/kubeflow/v2beta1/types.go: MPIJobSpec.MPIReplicaSpecs, ReplicaSpec.Template (v1 alike)",
    ),
    ObjectType("trainer.kubeflow.org", "TrainingRuntime"): _TRAINING_RUNTIME,
    ObjectType("trainer.kubeflow.org", "ClusterTrainingRuntime"): _TRAINING_RUNTIME,
    ObjectType("workload.codeflare.dev", "AppWrapper"): Workload(
        (),
        "https://github.com/project-codeflare/appwrapper at v1.2.1 (b47a99ee8e289ddd9f968069f1fe61decbb5ef8c), "
        "api/v1beta2/appwrapper_types.go: AppWrapperSpec.Components, AppWrapperComponent.Template (a whole object)",
        objects=(("spec", "components", "*", "template"),),
    ),
    ObjectType("kueue.x-k8s.io", "Workload"): Workload(
        (("spec", "podSets", "*", *_TEMPLATE),),
        "https://github.com/kubernetes-sigs/kueue at v0.17.1 (6fcc132c0121b3f5e8b49246fc13e2e66c6f0620), "
        "apis/kueue/v1beta1/workload_types.go and v1beta2: WorkloadSpec.PodSets, PodSet.Template",
    ),
}

# Kinds whose pods no one object holds, so no check of one object can judge them.
UNJUDGED: Final[dict[ObjectType, str]] = {
    ObjectType("trainer.kubeflow.org", "TrainJob"): (
        "its pods are the pod templates of the training runtime spec.runtimeRef names, patched by spec.trainer "
        "(image, resourcesPerNode) and spec.runtimePatches (github.com/kubeflow/trainer at v2.3.0, "
        "pkg/apis/trainer/v1alpha1/trainjob_types.go)"
    ),
    ObjectType("sparkoperator.k8s.io", "SparkApplication"): (
        "the Spark operator builds its driver and executor pods from spec.image, spec.driver and spec.executor, "
        "which are not pod templates (Kueue v0.17.1 admits it as sparkoperator.k8s.io/sparkapplication, "
        "pkg/controller/jobs/sparkapplication)"
    ),
}

# The kinds Kueue v0.17.1 admits, by its integrations' FrameworkName constants (github.com/kubernetes-sigs/kueue at
# v0.17.1, 6fcc132c0121b3f5e8b49246fc13e2e66c6f0620, pkg/controller/jobs/*/*_controller.go): each is either read
# (WORKLOADS) or named as not judged (UNJUDGED); tests hold that.
KUEUE_INTEGRATIONS: Final = (
    ObjectType("batch", "Job"),
    ObjectType("", "Pod"),
    ObjectType("apps", "Deployment"),
    ObjectType("apps", "StatefulSet"),
    ObjectType("jobset.x-k8s.io", "JobSet"),
    ObjectType("kubeflow.org", "JAXJob"),
    ObjectType("kubeflow.org", "PaddleJob"),
    ObjectType("kubeflow.org", "PyTorchJob"),
    ObjectType("kubeflow.org", "TFJob"),
    ObjectType("kubeflow.org", "XGBoostJob"),
    ObjectType("kubeflow.org", "MPIJob"),
    ObjectType("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ObjectType("ray.io", "RayCluster"),
    ObjectType("ray.io", "RayJob"),
    ObjectType("ray.io", "RayService"),
    ObjectType("workload.codeflare.dev", "AppWrapper"),
    ObjectType("trainer.kubeflow.org", "TrainJob"),
    ObjectType("sparkoperator.k8s.io", "SparkApplication"),
)


@dataclass(frozen=True)
class Member:
    """One object `kubectl apply` (or a controller) makes from an object: the object itself, a List's item, an
    AppWrapper's component. `problem` says why it cannot be read as an object (then `type` is None)."""

    path: str
    """Where it sits in the object it came from ("" for the object itself), e.g. `items[2]`."""
    type: ObjectType | None
    obj: Any
    queued: bool
    """It, or a workload that carries it, is labelled for a Kueue queue."""
    queue_path: str = ""
    """The object whose queue label Kueue reads for it: itself, or the AppWrapper that carries it."""
    problem: str | None = None


@dataclass(frozen=True)
class PodSpec:
    """One pod spec, with the dotted path it sits at (for messages)."""

    path: str
    spec: Any
    queued: bool
    queue_path: str = ""
    """Where the object whose Kueue queue label counts for this pod sits ("" for the object checked)."""


def join(path: str, step: str) -> str:
    """`path` and one more step: `spec` + `template` -> `spec.template`, `x` + `[0]` -> `x[0]`."""
    if not path:
        return step
    return f"{path}{step}" if step.startswith("[") else f"{path}.{step}"


def _known(value: Any, path: str) -> Any:
    """`value`, stopping the rule when it is unknown during preview."""
    if value is UNKNOWN:
        unknown_during_preview(path.split(".") if path else ["(root)"])
    return value


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def describe(value: Any) -> str:
    """What kind of YAML value `value` is, for messages."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, Mapping):
        return "a mapping"
    if is_list(value):
        return "a list"
    if isinstance(value, str):
        return "text"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


def _is_set(value: Any) -> bool:
    return value is not MISSING and value is not None


def _queued(obj: Any) -> bool:
    labels = at(obj, "metadata", "labels")
    return isinstance(labels, Mapping) and _is_set(at(labels, KUEUE_QUEUE_LABEL))


def _text_field(obj: Any, field: str, path: str) -> str | None:
    value = _known(at(obj, field), join(path, field))
    return value if isinstance(value, str) and value else None


def _item_type(list_type: ObjectType, item: Any, path: str) -> tuple[ObjectType | None, str | None]:
    """A List item's type, or why it has none. An item with neither kind nor apiVersion takes them from a typed
    List (`JobList` -> Job of the List's group), as kubectl's decoder does: github.com/kubernetes/apimachinery at
    v0.35.0 (72d71eac265e06713c6d83d7034aac609450243f), pkg/apis/meta/v1/unstructured/helpers.go, decodeToList."""
    if not isinstance(item, Mapping):
        return None, f"it must be an object (a mapping with kind and apiVersion), found {describe(item)}"
    api_version, kind = _text_field(item, "apiVersion", path), _text_field(item, "kind", path)
    if api_version is None and kind is None:
        if list_type.kind.endswith("List") and list_type.kind != "List":
            return ObjectType(list_type.group, list_type.kind.removesuffix("List")), None
        return None, (
            f"it has no kind and no apiVersion, and its {list_type.kind} gives it none (only a typed List such "
            "as JobList does; kubectl refuses it: Object 'Kind' is missing)"
        )
    if kind is None:
        return None, "it has an apiVersion but no kind (kubectl refuses it)"
    if api_version is None:
        return None, "it has a kind but no apiVersion (kubectl refuses it)"
    found = type_of(api_version, kind)
    if found is None:
        return None, f"apiVersion {api_version!r} is not [group/]version (kubectl refuses it)"
    return found, None


def members(object_type: ObjectType, obj: Any) -> Iterator[Member]:
    """`obj` and every object it carries, depth-first: what `kubectl apply -f` creates and what AppWrapper's
    controller creates from it.

    Any object with `items` is a List to kubectl: its decoder takes an object with an `items` field for a list
    whatever its kind (apimachinery, helpers.go `decode`), and kubectl flattens Lists inside Lists
    (github.com/kubernetes/cli-runtime at v0.35.6, ff1e0eb57d37ab9569d194180be02347396d64c9,
    pkg/resource/visitor.go, FlattenListVisitor). The object itself is read by its own kind too, so that the
    policy engine, which creates it as that kind, sees what kubectl does not."""
    yield from _members(object_type, obj, "", False, "", 0)


def _members(
    object_type: ObjectType, obj: Any, path: str, queued: bool, queue_path: str, depth: int
) -> Iterator[Member]:
    queued = queued or _queued(obj)
    yield Member(path, object_type, obj, queued, queue_path)
    carried: list[tuple[str, Any, bool]] = []  # (path, object, whether its parent's queue label holds for it)
    items = _known(at(obj, "items"), join(path, "items"))
    if _is_set(items):
        if not is_list(items):
            refusal = f"items must be a list of objects, found {describe(items)}"
            yield Member(join(path, "items"), None, items, False, problem=refusal)
        else:
            carried += [
                (join(path, f"items[{index}]"), item, False) for index, item in enumerate(elements(items))
            ]
    workload = WORKLOADS.get(object_type)
    for steps in workload.objects if workload else ():
        found, _ = walk(obj, steps, path)
        carried += [(where, value, True) for where, value in found]
    for where, item, inherits in carried:
        item = _known(item, where)
        if depth + 1 > MAX_NESTING:
            yield Member(
                where, None, item, False, problem=f"objects nested more than {MAX_NESTING} deep are not read"
            )
            continue
        item_type, problem = _item_type(object_type, item, where)
        if item_type is None:
            yield Member(where, None, item, False, problem=problem)
        elif inherits:
            yield from _members(item_type, item, where, queued, queue_path, depth + 1)
        else:
            yield from _members(item_type, item, where, False, where, depth + 1)


def walk(obj: Any, steps: Steps, base: str) -> tuple[list[tuple[str, Any]], list[str]]:
    """The values at `steps` inside `obj` (MISSING and null ones left out), and each place where a value on the
    way has a shape that no Kubernetes object has (a mapping where the API takes a list, ...)."""
    found: list[tuple[str, Any]] = [(base, obj)]
    problems: list[str] = []
    for step in steps:
        following: list[tuple[str, Any]] = []
        for path, value in found:
            value = _known(value, path)
            if step == "*":
                if not is_list(value):
                    problems.append(f"{path} is {describe(value)}, where the API takes a list")
                    continue
                following += [(join(path, f"[{index}]"), item) for index, item in enumerate(elements(value))]
                continue
            if not isinstance(value, Mapping):
                problems.append(f"{path} is {describe(value)}, where the API takes a mapping")
                continue
            if step == "{}":
                following += [(join(path, str(key)), at(value, key)) for key in sorted(value, key=str)]
                continue
            inner = _known(at(value, step), join(path, step))
            if _is_set(inner):
                following.append((join(path, step), inner))
        found = following
    return [(path, _known(value, path)) for path, value in found], problems


def _judged(members_: Iterator[Member]) -> Iterator[tuple[Member, Workload]]:
    for member in members_:
        if member.type is not None:
            workload = WORKLOADS.get(member.type)
            if workload is not None:
                yield member, workload


def pod_specs(object_type: ObjectType, obj: Any) -> Iterator[PodSpec]:
    """Every pod spec of `obj` and of every object it carries; values of the wrong shape are left to
    `unreadable`."""
    for member, workload in _judged(members(object_type, obj)):
        for steps in workload.pods:
            found, _ = walk(member.obj, steps, member.path)
            yield from (
                PodSpec(path, spec, member.queued, member.queue_path)
                for path, spec in found
                if isinstance(spec, Mapping)
            )


def image_fields(object_type: ObjectType, obj: Any) -> Iterator[tuple[str, Any]]:
    """Every container image named outside a pod spec (`Workload.images`), with its path."""
    for member, workload in _judged(members(object_type, obj)):
        for steps in workload.images:
            found, _ = walk(member.obj, steps, member.path)
            yield from found


def containers(pod: PodSpec, lists: tuple[str, ...] = CONTAINER_LISTS) -> Iterator[tuple[str, Any]]:
    """Each container of `pod` (of `lists`), with its path; entries that are not mappings are left out."""
    for field in lists:
        path = join(pod.path, field)
        value = _known(at(pod.spec, field), path)
        if is_list(value):
            for index, container in enumerate(elements(value)):
                if isinstance(_known(container, f"{path}[{index}]"), Mapping):
                    yield f"{path}[{index}]", container


# --- objects no rule can read ---------------------------------------------------------------------------------

_QUANTITY = "a quantity (a number or text such as 8)"


def _expect(value: Any, path: str, shape: str) -> list[str]:
    """[] when `value` is unset or of `shape` ("mapping", "list of mappings", "text", a quantity), else the
    problem."""
    if value is MISSING or value is None or value is UNKNOWN:
        return []
    ok = {
        "mapping": isinstance(value, Mapping),
        "list of mappings": is_list(value)
        and all(isinstance(v, Mapping) or v is UNKNOWN for v in elements(value)),
        "text": isinstance(value, str),
        _QUANTITY: isinstance(value, str | int | float) and not isinstance(value, bool),
    }[shape]
    if ok:
        return []
    if shape == "list of mappings" and is_list(value):
        index, bad = next(
            (i, v) for i, v in enumerate(elements(value)) if not isinstance(v, Mapping) and v is not UNKNOWN
        )
        return [f"{path}[{index}] is {describe(bad)}, where the API takes a mapping"]
    return [
        f"{path} is {describe(value)}, where the API takes {'a ' if shape in ('mapping', 'list of mappings') else ''}{shape}"
    ]


def _container_shape(path: str, container: Any) -> list[str]:
    problems = _expect(at(container, "image"), join(path, "image"), "text")
    resources = at(container, "resources")
    problems += _expect(resources, join(path, "resources"), "mapping")
    for section in ("requests", "limits") if isinstance(resources, Mapping) else ():
        where = join(path, f"resources.{section}")
        amounts = at(resources, section)
        problems += _expect(amounts, where, "mapping")
        if isinstance(amounts, Mapping):
            problems += _expect(at(amounts, GPU_RESOURCE), f"{where}.{GPU_RESOURCE}", _QUANTITY)
    return problems + _expect(at(container, "volumeMounts"), join(path, "volumeMounts"), "list of mappings")


def _pod_shape(pod: PodSpec) -> list[str]:
    problems: list[str] = []
    for field in (*CONTAINER_LISTS, "tolerations", "volumes"):
        problems += _expect(at(pod.spec, field), join(pod.path, field), "list of mappings")
    for path, container in containers(pod):
        problems += _container_shape(path, container)
    volumes = at(pod.spec, "volumes")
    for index, volume in enumerate(elements(volumes) if is_list(volumes) else ()):
        if isinstance(volume, Mapping):
            problems += _expect(
                at(volume, "emptyDir"), join(pod.path, f"volumes[{index}].emptyDir"), "mapping"
            )
    return problems


def unreadable(object_type: ObjectType, obj: Any) -> list[str]:
    """Each reason `obj` (or an object it carries) is one the API server would refuse, where a rule reads it:
    a List item without a kind, `items` that is not a list, a pod spec or `containers` of the wrong shape."""
    problems: list[str] = []
    for member in members(object_type, obj):
        if member.problem is not None:
            problems.append(f"{member.path or '(the object)'}: {member.problem}")
            continue
        workload = WORKLOADS.get(member.type) if member.type is not None else None
        if workload is None:
            continue
        for steps in workload.pods:
            found, wrong = walk(member.obj, steps, member.path)
            problems += wrong
            for path, spec in found:
                if isinstance(spec, Mapping):
                    problems += _pod_shape(PodSpec(path, spec, member.queued))
                else:
                    problems.append(f"{path} is {describe(spec)}, where the API takes a pod spec (a mapping)")
        for steps in workload.images:
            found, wrong = walk(member.obj, steps, member.path)
            problems += wrong + [problem for path, value in found for problem in _expect(value, path, "text")]
        for steps in workload.objects:
            problems += walk(member.obj, steps, member.path)[1]
    return problems


# --- workloads no rule can judge ------------------------------------------------------------------------------

# Fields of an object that say nothing about the pods it makes: `items` are members of their own; a ConfigMap's
# and a Secret's data are opaque text.
_NOT_SEARCHED: Final = frozenset(
    {"apiVersion", "kind", "metadata", "status", "items", "data", "binaryData", "stringData"}
)


def _signals(obj: Any, path: str, depth: int = 0) -> Iterator[str]:
    """Where an object of a kind not in WORKLOADS shows that it makes pods: a `containers` or `initContainers`
    list, an `image` that is text, a `nvidia.com/gpu` key (a GPU request)."""
    if depth > _MAX_SEARCH_DEPTH:
        yield f"{path} (nested more than {_MAX_SEARCH_DEPTH} deep, not read)"
        return
    if isinstance(obj, Mapping):
        for key in sorted(obj, key=str):
            if depth == 0 and key in _NOT_SEARCHED:
                continue
            value = at(obj, key)
            if value is UNKNOWN:
                continue
            where = join(path, str(key))
            pod_list = key in ("containers", "initContainers") and is_list(value)
            if pod_list or key == GPU_RESOURCE or (key == "image" and isinstance(value, str)):
                yield where
            else:
                yield from _signals(value, where, depth + 1)
    elif is_list(obj):
        for index, value in enumerate(elements(obj)):
            if value is not UNKNOWN:
                yield from _signals(value, join(path, f"[{index}]"), depth + 1)


@dataclass(frozen=True)
class Unchecked:
    """An object whose pods no rule could judge."""

    path: str
    type: ObjectType
    message: str


_READ_KINDS: Final = ", ".join(sorted({t.kind for t in WORKLOADS}))


def _fix(object_type: ObjectType) -> str:
    return (
        f"Fix: run its pods as a kind the rules read ({_READ_KINDS}), or accept it unchecked by name: "
        f"`gpuforge policy kubernetes --allow-unchecked {object_type.kind}` (under `pulumi preview`, set "
        "kubernetes-workload-checked to advisory in the policy pack's config)."
    )


def unchecked_workloads(object_type: ObjectType, obj: Any) -> list[Unchecked]:
    """Each object (`obj` or one it carries) that makes pods no rule here judges: a kind in UNJUDGED, or a kind
    not in WORKLOADS that shows pods (`_signals`)."""
    found = []
    for member in members(object_type, obj):
        if member.type is None or member.type in WORKLOADS:
            continue
        at_path = f"{member.path}: " if member.path else ""
        reason = UNJUDGED.get(member.type)
        if reason is not None:
            message = f"{at_path}{member.type} was not checked: {reason}. {_fix(member.type)}"
        else:
            signals = list(_signals(member.obj, member.path))
            if not signals:
                continue
            shown = ", ".join(signals[:3]) + (f" and {len(signals) - 3} more" if len(signals) > 3 else "")
            message = (
                f"{at_path}{member.type} was not checked: it is not a kind whose pods these rules know where to "
                f"find, yet it makes pods ({shown}), so their images could be tags and their GPU pods could never "
                f"land. {_fix(member.type)}"
            )
        found.append(Unchecked(member.path, member.type, message))
    return found
