"""`gpuforge scheduler apply`: put a Kubernetes stack's rendered objects on its cluster, and take off what it dropped.

The objects are the very ones `gpuforge scheduler render` writes (`manifests.stack_addons` and `objects_of`, in
memory), sent by server-side apply with the field manager `gpuforge`. Every step that can refuse runs before the
first write, so a refusal leaves the cluster as it was:

1. Read the kubeconfig (gpuforge.kubernetes.kubeconfig: read as every user file is, its context checked, its
   files and credential plugin resolved), then reach the API server. The EKS endpoint is private, so not reaching
   it is an environment to fix (exit 2: run from the VPC, a bastion or an SSM port forward), not a failed apply;
   so is a server that answers as no API server does (a web page: the kubeconfig points elsewhere).
2. Kueue: the render's kueue.x-k8s.io kinds must be served (Kueue's CRDs) and the Deployment
   `kueue-system/kueue-controller-manager` must run the image digest pinned in gpuforge/data/kubernetes_addons.yaml;
   otherwise exit 2 with the `helm upgrade --install` command of the pinned chart and gpuforge's values.
3. Read each rendered object. One carrying gpuforge's managed-by label with another cluster's label is another
   gpuforge cluster's: refused (exit 2), never taken over.
4. A server-side dry run (dryRun=All) of every object: admission, validation, the CRDs' CEL rules and field
   ownership conflicts are all judged before anything is stored. `--dry-run` stops here and reports.
5. Apply in order: Namespaces, RBAC, the rest, then Kueue's objects (Topology before the flavors that name it,
   ClusterQueues before the LocalQueues that point at them). Then prune, in the reverse order.

gpuforge renders no CustomResourceDefinition (Kueue's come with its chart, checked in step 2), so there is no
CRD step and no wait for Established; a render that gained one would fail the PRUNE_KINDS guard test first.

Conflicts: gpuforge forces (`force=true`) only on objects that are already its own (both ownership labels):
the render is their source of truth, so a hand edit of a field gpuforge sets is taken back, as a controller
would. An object that exists without gpuforge's labels (a namespace a platform team made) is applied without
force: gpuforge adds its fields and labels, and a field another manager owns with a different value is a
conflict reported with the fix (exit 2), found by the dry run before anything is written.

Prune: objects of PRUNE_KINDS carrying both of this cluster's ownership labels (addons.ownership_labels) that
the render no longer has are deleted: a team removed from the stack loses its ClusterQueue and LocalQueue.
Namespaces are the exception: deleting one deletes every workload of the team in it, so a dropped team's
namespace is reported `kept` with the command that would delete it, and a person decides.

Waits: the whole command has one deadline (`--timeout`, gpuforge.scheduler.cli), and every request's timeout is cut
from what is left of it, each request made once (gpuforge.deadline says why that takes both).

Exit codes: 0 applied or nothing to do; 1 the API server failed, answered garbage or timed out mid-way, or the
deadline passed (run again: apply is idempotent); 2 bad input (the kubeconfig included), Kueue missing or not
as pinned, an unreachable server or refused credentials, an object the server refuses.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.display import cut, printable
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.kubernetes.addons import CLUSTER_LABEL, DATA_FILE, MANAGED_BY, MANAGED_BY_LABEL, Image, pins
from gpuforge.kubernetes.kubeconfig import Kubeconfig, UnexpectedAnswer, connection_problem
from gpuforge.kubernetes.kubeconfig import api_client as kube_api_client
from gpuforge.kubernetes.manifests import objects_of, stack_addons

if TYPE_CHECKING:
    from gpuforge.deadline import Deadline
    from gpuforge.stack_config import StackConfig

FIELD_MANAGER = "gpuforge"
KUEUE_GROUP = "kueue.x-k8s.io"
# Kueue's chart installed as the release `kueue` in `kueue-system` names its controller Deployment
# `<release>-controller-manager` (kubernetes-sigs/kueue charts/kueue/templates/manager/manager.yaml,
# `{{ include "kueue.fullname" . }}-controller-manager`; charts/kueue/README.md shows `kueue-controller-manager`).
KUEUE_RELEASE = "kueue"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = f"{KUEUE_RELEASE}-controller-manager"
VALUES_FILE = "addons/kueue-values.yaml"
_RBAC_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"})
# Kueue's kinds in dependency order: a flavor names its Topology, a ClusterQueue its flavors and a LocalQueue
# its ClusterQueue.
_KUEUE_ORDER = ("Topology", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue")
_RBAC_API = "rbac.authorization.k8s.io/v1"


def _kueue_api() -> str:
    api = pins().addons["kueue"].api_version
    assert api is not None, f"{DATA_FILE}: kueue.api_version is required"
    return api


# Every kind gpuforge renders (tests guard that the render has no other): prune lists these and no others.
PRUNE_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Namespace"),
    (_RBAC_API, "ClusterRole"),
    (_RBAC_API, "ClusterRoleBinding"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("apps/v1", "DaemonSet"),
    *((_kueue_api(), kind) for kind in _KUEUE_ORDER),
)


class KubernetesApplyError(GpuforgeError):
    """The API server failed or did not answer mid-way: nothing is wrong with the input (exit 1, run again)."""

    exit_code = 1


@dataclass(frozen=True)
class Change:
    """One line of the report: `verb` is created, changed, unchanged, pruned or kept."""

    verb: str
    what: str
    note: str = ""

    def line(self, dry_run: bool) -> str:
        suffix = f" ({self.note})" if self.note else ""
        prefix = "dry run: " if dry_run else ""
        return f"{prefix}{self.verb:<9} {self.what}{suffix}"


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def _rank(obj: dict[str, Any]) -> int:
    kind = obj["kind"]
    if kind == "Namespace":
        return 1
    if kind in _RBAC_KINDS:
        return 2
    if _group(obj["apiVersion"]) == KUEUE_GROUP:
        return 4 + _KUEUE_ORDER.index(kind)
    return 3


def ordered(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply order (see the module docstring); stable within a rank, so the render's order holds."""
    return sorted(objects, key=_rank)


def describe(obj: dict[str, Any]) -> str:
    """`Kind name`, or `Kind namespace/name`: how the report names an object."""
    metadata = obj["metadata"]
    where = f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]
    return f"{obj['kind']} {where}"


def _server_message(error: Any) -> str:
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return printable(str(message or error.reason or "no message"))[:300]


def _import_client() -> Any:
    try:
        import kubernetes
    except ImportError as error:
        raise GpuforgeError(
            "`gpuforge scheduler apply` needs the `kubernetes` Python client, which is not installed here. "
            "Fix: `pip install kubernetes==35.0.0` (gpuforge's pin) on the host that runs apply."
        ) from error
    return kubernetes


def connect(config: Kubeconfig, deadline: Deadline) -> Any:
    """An ApiClient for the kubeconfig's context (gpuforge.kubernetes.kubeconfig: every request once, its
    timeout cut from `deadline`), after one answered request, GET /version.

    The first contact says what a failure means. No connection (refused, no route, TLS refused, a name that
    does not resolve), or an answer no Kubernetes API server gives (a web page, a redirect, a 404): the
    kubeconfig or the host apply runs from is to fix (exit 2). A 5xx, or a server that accepted the
    connection and did not answer: the server's (exit 1, run again).
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import ProtocolError, ReadTimeoutError

    where = f"{config.source}, context {config.context}"
    host = printable(config.server)
    api_client = kube_api_client(config, deadline=deadline)
    deadline.doing = f"GET {host}/version (the first request)"
    try:
        version = api_client.call_api(
            "/version",
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
    except ApiException as error:
        if error.status == 0:  # the client's word for a failed TLS handshake
            raise InputError(_unreachable(host, where, error, tls=True)) from None
        if error.status in {401, 403}:
            raise InputError(_refused_identity(host, error)) from None
        if error.status >= 500:
            raise KubernetesApplyError(
                f"the Kubernetes API server at {host} answered HTTP {error.status} {_server_message(error)} to "
                "GET /version. Fix: run again; if it persists, check the cluster's health."
            ) from None
        raise InputError(
            _not_a_server(host, where, f"HTTP {error.status} {_server_message(error)}")
        ) from None
    except UnexpectedAnswer as error:
        raise InputError(_not_a_server(host, where, f"HTTP {error.status} with {error.detail}")) from None
    except ProtocolError as error:
        if config.server.startswith("http://"):
            raise InputError(
                _not_a_server(
                    host,
                    where,
                    f"nothing: it closed the connection ({connection_problem(error)}), as a "
                    "TLS server does to plain HTTP (an API server is https://)",
                )
            ) from None
        raise KubernetesApplyError(
            f"the server at {host} ({where}) closed the connection without answering GET /version "
            f"({connection_problem(error)}). Fix: run again; if it persists, check that the server (or the port "
            "forward to it) is up."
        ) from None
    except ReadTimeoutError as error:
        raise KubernetesApplyError(
            f"the server at {host} ({where}) accepted the connection and gave no answer to GET /version "
            f"({connection_problem(error)}). Fix: run again; if it persists, check that the server (or the "
            "port forward to it) is up."
        ) from None
    except _connection_errors() as error:
        raise InputError(_unreachable(host, where, error, tls=False)) from None
    if "gitVersion" not in json.loads(version.data):
        raise InputError(
            _not_a_server(host, where, "JSON without the gitVersion every API server's /version has")
        )
    return api_client


def _unreachable(host: str, where: str, error: BaseException, *, tls: bool) -> str:
    tls_fix = (
        " The TLS handshake failed: the kubeconfig's certificate-authority(-data) must be the cluster's CA, and "
        "the server must speak HTTPS (an http:// server behind an https:// URL fails so too)."
        if tls
        else ""
    )
    return (
        f"cannot reach the Kubernetes API server at {host} ({where}): {connection_problem(error)}.{tls_fix} The "
        "EKS endpoint gpuforge makes is private. Fix: run apply from a host that reaches it (in the cluster's VPC, a "
        "bastion, or an SSM port forward to the endpoint with a kubeconfig pointing at it), and check --kubeconfig "
        "and --context."
    )


def _not_a_server(host: str, where: str, answer: str) -> str:
    return (
        f"the server at {host} ({where}) answered GET /version with {answer}: not a Kubernetes API server. Fix: "
        "point the kubeconfig's cluster server at the API server's URL (`aws eks describe-cluster --name CLUSTER "
        "--query cluster.endpoint`; `aws eks update-kubeconfig --name CLUSTER` writes it), and check --context."
    )


def _connection_errors() -> tuple[type[Exception], ...]:
    """What the client raises when the connection itself fails: urllib3's errors (timeouts, refused, TLS)."""
    import urllib3

    return (urllib3.exceptions.HTTPError, OSError)


def _api_errors() -> tuple[type[Exception], ...]:
    """What a request can raise: the server's answer (ApiException), an answer no API server gives, or a
    failed connection."""
    from kubernetes.client.exceptions import ApiException

    return (ApiException, UnexpectedAnswer, *_connection_errors())


def _refused_identity(host: str, error: Any) -> str:
    return (
        f"the Kubernetes API server at {host} refused the kubeconfig's identity: HTTP {error.status} "
        f"{_server_message(error)}. Fix: use an identity allowed to manage cluster-wide objects (on a gpuforge EKS "
        "cluster, the adminRoleArn role: its access entry has AmazonEKSClusterAdminPolicy), e.g. "
        "`aws eks update-kubeconfig --name CLUSTER --role-arn ADMIN_ROLE_ARN`."
    )


def _same_image(reference: str, image: Image) -> bool:
    """Whether `reference` (`repo[:tag]@sha256:...`, as Kueue's chart writes it) is the pinned digest of `image`."""
    name, _, digest = reference.partition("@")
    last = name.rsplit("/", 1)[-1]
    repository = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return repository == image.repository and digest == image.digest


def helm_command(stack_dir: str, stack: str, kubeconfig: Path | None, context: str | None) -> str:
    """The two commands that install Kueue as gpuforge pins it: render (writes the values), then helm."""
    addon = pins().addons["kueue"]
    chart = addon.chart
    assert chart is not None and chart.repository is not None, (
        f"{DATA_FILE}: kueue.chart.repository is required"
    )
    out = f"gpuforge-render-{stack}"
    helm = [
        "helm", "upgrade", "--install", KUEUE_RELEASE, chart.repository, "--version", chart.version,
        "--namespace", KUEUE_NAMESPACE, "--create-namespace", "--values", f"{out}/{VALUES_FILE}", "--wait",
    ]  # fmt: skip
    if kubeconfig is not None:
        helm += ["--kubeconfig", str(kubeconfig)]
    if context is not None:
        helm += ["--kube-context", context]
    render = ["gpuforge", "scheduler", "render", stack_dir, "--stack", stack, "--out", out]
    return (
        f"  {shlex.join(render)}\n  {shlex.join(helm)}\n(chart digest {chart.digest}: {chart.digest_source})"
    )


def _as_dict(method: Callable[..., Any], **kwargs: Any) -> Any:
    """`method(**kwargs)` as plain data: a dynamic client's answer, read inside `_Session.call`."""
    return method(**kwargs).to_dict()


# What the client raises on an answer of the wrong shape (JSON that is not the object it expects).
_MISREAD: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError, AttributeError)


def _call_errors() -> tuple[type[Exception], ...]:
    """What a call of the client raises for the server's sake: `_api_errors`, and `_MISREAD` from its parsing."""
    return (*_api_errors(), *_MISREAD)


@dataclass
class _Session:
    api: Any  # kubernetes.dynamic.DynamicClient
    cluster: str
    host: str
    deadline: Deadline

    def call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`method(...)`, a call of the `kubernetes` client, with the API server's refusals, silences and
        answers of the wrong shape turned into gpuforge errors; `what` names the step if the deadline passes."""
        self.deadline.doing = what
        try:
            return method(*args, **kwargs)
        except _call_errors() as error:
            raise self.error(what, error) from None

    def error(self, what: str, error: Exception) -> Exception:
        """The gpuforge error for `error` raised while doing `what` (anything else is returned as it is)."""
        from kubernetes.client.exceptions import ApiException

        again = "Fix: run apply again (it is idempotent); if it persists, check the control plane's health."
        if (
            isinstance(error, ApiException) and error.status == 0
        ):  # the client's word for a failed TLS handshake
            return KubernetesApplyError(
                f"{what}: the TLS connection to the API server at {self.host} failed ({connection_problem(error)}). "
                f"{again}"
            )
        if isinstance(error, ApiException):
            if error.status in {401, 403}:
                return InputError(f"{what}: " + _refused_identity(self.host, error))
            if error.status == 409:
                return InputError(
                    f"{what}: HTTP 409 {_server_message(error)}. Nothing was applied. Another field manager owns a "
                    "field gpuforge sets on an object gpuforge did not make. Fix: remove that manager's value "
                    "(or delete the object, so gpuforge makes it), then run apply again."
                )
            if error.status in {400, 404, 422}:
                return InputError(
                    f"{what}: the API server refused it: HTTP {error.status} {_server_message(error)}. Fix: correct "
                    "the stack's gpuforge:scheduler block (or the cluster's Kubernetes version), render to look at "
                    "the object, then run apply again."
                )
            return KubernetesApplyError(
                f"{what}: the API server at {self.host} answered HTTP {error.status} {_server_message(error)}. {again}"
            )
        if isinstance(error, (UnexpectedAnswer, *_MISREAD)):
            return KubernetesApplyError(
                f"{what}: the server at {self.host} answered what no Kubernetes API server sends "
                f"({printable(str(error))[:300]}). {again}"
            )
        if isinstance(error, _connection_errors()):
            return KubernetesApplyError(
                f"{what}: the API server at {self.host} did not answer ({connection_problem(error)}; the command's "
                f"deadline has {max(self.deadline.left(), 0):.0f} s of {self.deadline.seconds:g} s left). {again}"
            )
        return error

    def resource(self, api_version: str, kind: str) -> Any:
        """The dynamic client's resource for the kind; InputError where the server does not serve it."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            return self.call(
                f"look up {kind} ({api_version})", self.api.resources.get, api_version=api_version, kind=kind
            )
        except ResourceNotFoundError:
            raise InputError(
                f"the API server at {self.host} does not serve {kind} ({api_version}). Fix: install what serves "
                "it (for kueue.x-k8s.io kinds, Kueue's chart at the pinned version), then run apply again."
            ) from None

    def served(self, api_version: str, kind: str) -> bool:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            self.call(
                f"look up {kind} ({api_version})", self.api.resources.get, api_version=api_version, kind=kind
            )
        except ResourceNotFoundError:
            return False
        return True

    def read(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        """The object as the server has it, or None where there is none."""
        resource = self.resource(api_version, kind)
        what = f"read {kind} {name}"
        self.deadline.doing = what
        try:
            found = resource.get(name=name, namespace=namespace).to_dict()
        except _call_errors() as error:
            if getattr(error, "status", None) == 404:
                return None
            raise self.error(what, error) from None
        return self.object(what, found)

    def object(self, what: str, found: object) -> dict[str, Any]:
        """`found`, an object the server sent, if it has what apply reads of one (metadata.name, labels)."""
        metadata = found.get("metadata") if isinstance(found, dict) else None
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        if not (
            isinstance(found, dict)
            and isinstance(metadata, dict)
            and isinstance(metadata.get("name"), str)
            and (labels is None or isinstance(labels, dict))
        ):
            raise self.error(what, TypeError(f"an object without metadata.name: {cut(found)}"))
        return found


def _ours(obj: dict[str, Any] | None, cluster: str) -> bool:
    labels = (obj or {}).get("metadata", {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(CLUSTER_LABEL) == cluster)


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object less what every write changes by itself (resourceVersion, managedFields' times)."""
    metadata = {
        k: v for k, v in obj.get("metadata", {}).items() if k not in {"resourceVersion", "managedFields"}
    }
    return {**obj, "metadata": metadata}


def check_kueue(session: _Session, objects: Sequence[dict[str, Any]], fix: str) -> None:
    """InputError (nothing applied) unless Kueue serves the render's kinds and runs the pinned image."""
    kinds = sorted(
        {(obj["apiVersion"], obj["kind"]) for obj in objects if _group(obj["apiVersion"]) == KUEUE_GROUP}
    )
    if not kinds:
        return
    addon = pins().addons["kueue"]
    image = addon.images[0]
    if image.digest is None:
        raise InputError(
            f"gpuforge/{DATA_FILE}: addons.kueue has no sourced image digest ({addon.unsourced}), so gpuforge cannot "
            "check the Kueue it would apply queues to. Fix: source the digest there first."
        )
    found = []
    missing = [
        f"{kind} ({api_version})" for api_version, kind in kinds if not session.served(api_version, kind)
    ]
    if missing:
        found.append(
            f"the API server does not serve {', '.join(missing)} (Kueue's CRDs are missing or older)"
        )
    deployment = session.read("apps/v1", "Deployment", KUEUE_DEPLOYMENT, KUEUE_NAMESPACE)
    where = f"{KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT}"
    if deployment is None:
        found.append(f"there is no Deployment {where}")
    else:
        images = _images(deployment)
        if not any(_same_image(reference, image) for reference in images):
            found.append(
                f"Deployment {where} runs {', '.join(images) or 'no container'}, not "
                f"{image.repository}@{image.digest} (Kueue {addon.version}, gpuforge/{DATA_FILE})"
            )
    if found:
        raise InputError(
            f"cluster {session.cluster}: Kueue {addon.version} is not installed as gpuforge pins it: "
            f"{'; '.join(found)}. Nothing was applied. Fix: install Kueue from its pinned chart with gpuforge's "
            f"values, then run apply again:\n{fix}"
        )


def _images(deployment: dict[str, Any]) -> list[str]:
    """The container images of a Deployment as the server sent it (none where it is not of that shape)."""
    found: Any = deployment
    for key in ("spec", "template", "spec", "containers"):
        found = found.get(key) if isinstance(found, dict) else None
    containers = found if isinstance(found, list) else []
    return [str(container.get("image")) for container in containers if isinstance(container, dict)]


def _namespaces_present(session: _Session, objects: Sequence[dict[str, Any]]) -> set[str]:
    wanted = {obj["metadata"]["namespace"] for obj in objects if obj["metadata"].get("namespace")}
    return {name for name in sorted(wanted) if session.read("v1", "Namespace", name, None) is not None}


def _apply_one(session: _Session, obj: dict[str, Any], *, force: bool, dry_run: bool) -> dict[str, Any]:
    metadata = obj["metadata"]
    resource = session.resource(obj["apiVersion"], obj["kind"])
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": force}
    if dry_run:
        kwargs["dry_run"] = "All"
    what = f"{'dry-run ' if dry_run else ''}apply {describe(obj)}"
    answer = session.call(
        what,
        _as_dict,
        resource.server_side_apply,
        body=obj,
        name=metadata["name"],
        namespace=metadata.get("namespace"),
        **kwargs,
    )
    return session.object(what, answer)


def _apply_all(
    session: _Session,
    objects: Sequence[dict[str, Any]],
    before: dict[str, dict[str, Any] | None],
    *,
    dry_run: bool,
    namespaces: set[str],
) -> list[Change]:
    changes = []
    for obj in objects:
        what = describe(obj)
        found = before[what]
        namespace = obj["metadata"].get("namespace")
        if dry_run and namespace and namespace not in namespaces:
            # The namespace is created by this apply: the server cannot judge its objects before it exists.
            changes.append(Change("created", what, f"namespace {namespace} is new: checked when it is made"))
            continue
        after = _apply_one(session, obj, force=_ours(found, session.cluster), dry_run=dry_run)
        if found is None:
            verb = "created"
        elif dry_run:
            verb = "unchanged" if _comparable(after) == _comparable(found) else "changed"
        else:
            same = after["metadata"].get("resourceVersion") == found["metadata"].get("resourceVersion")
            verb = "unchanged" if same else "changed"
        changes.append(Change(verb, what))
    return changes


def _stale(session: _Session, objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """This cluster's objects of PRUNE_KINDS that the render no longer has, in prune order."""
    wanted = {describe(obj) for obj in objects}
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{CLUSTER_LABEL}={session.cluster}"
    stale = []
    for api_version, kind in PRUNE_KINDS:
        resource = session.resource(api_version, kind)
        what = f"list {kind}"
        listed = session.call(what, _as_dict, resource.get, label_selector=selector)
        items = listed.get("items") if isinstance(listed, dict) else None
        if not isinstance(items, list | None):
            raise session.error(what, TypeError(f"items is not a list: {cut(items)}"))
        for item in items or []:
            obj = {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": session.object(what, item)["metadata"],
            }
            if describe(obj) not in wanted:
                stale.append(obj)
    return list(reversed(ordered(stale)))


def _prune(session: _Session, stale: Sequence[dict[str, Any]], *, dry_run: bool) -> list[Change]:
    changes = []
    for obj in stale:
        what = describe(obj)
        if obj["kind"] == "Namespace":
            name = obj["metadata"]["name"]
            note = f"the stack no longer has it; it holds the team's workloads: `kubectl delete namespace {name}`"
            changes.append(Change("kept", what, note))
            continue
        resource = session.resource(obj["apiVersion"], obj["kind"])
        kwargs: dict[str, Any] = {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"].get("namespace"),
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        session.deadline.doing = f"delete {what}"
        try:
            resource.delete(**kwargs)
        except _call_errors() as error:
            if getattr(error, "status", None) != 404:  # 404: already gone, nothing left to prune
                raise session.error(f"delete {what}", error) from None
        changes.append(Change("pruned", what))
    return changes


def apply_stack(
    config: StackConfig,
    *,
    stack_dir: str,
    kubeconfig: Path | None,
    context: str | None,
    kube: Kubeconfig,
    dry_run: bool,
    prune: bool,
    report: Callable[[str], None],
    ecr: Any,
    deadline: Deadline,
) -> list[Change]:
    """Apply a `type: kubernetes` stack's rendered objects (see the module docstring); report each change.

    `kube` is `kubeconfig` and `context` read and checked (`read_kubeconfig`, offline, before anything else).
    `ecr`, a boto3 ECR client in the stack's region, reads the digests of the images AWS publishes for EKS
    without one (`manifests.stack_addons`) before the cluster is contacted, so a tag ECR lacks is refused first.
    Every request is cut from `deadline`."""
    _import_client()
    from kubernetes.dynamic import DynamicClient

    deadline.doing = f"ECR DescribeImages in {config.region}"
    objects = ordered(objects_of(stack_addons(config, ecr=ecr)))
    cluster = config.stack
    api_client = connect(kube, deadline)
    host = printable(kube.server)
    with tempfile.TemporaryDirectory(prefix="gpuforge-discovery-") as folder:
        # A fresh discovery cache: Kueue's CRDs may have been installed a minute ago.
        probe = _Session(api=None, cluster=cluster, host=host, deadline=deadline)
        api = probe.call(
            "discover the API", DynamicClient, api_client, cache_file=str(Path(folder) / "cache.json")
        )
        session = _Session(api=api, cluster=cluster, host=host, deadline=deadline)
        check_kueue(session, objects, helm_command(stack_dir, cluster, kubeconfig, context))
        before = {
            describe(obj): session.read(
                obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
            )
            for obj in objects
        }
        _refuse_other_clusters(cluster, before)
        stale = _stale(session, objects) if prune else []
        namespaces = _namespaces_present(session, objects)
        changes = _apply_all(session, objects, before, dry_run=True, namespaces=namespaces)
        if not dry_run:
            changes = _apply_all(session, objects, before, dry_run=False, namespaces=namespaces)
        changes += _prune(session, stale, dry_run=dry_run)
    for change in changes:
        report(change.line(dry_run))
    counts = {
        verb: sum(change.verb == verb for change in changes) for verb in ("created", "changed", "unchanged")
    }
    pruned = sum(change.verb == "pruned" for change in changes)
    summary = ", ".join(f"{count} {verb}" for verb, count in counts.items()) + f", {pruned} pruned"
    report(f"{'dry run (nothing stored): ' if dry_run else ''}cluster {cluster} at {host}: {summary}")
    return changes


def _refuse_other_clusters(cluster: str, before: dict[str, dict[str, Any] | None]) -> None:
    taken = []
    for what, found in before.items():
        labels = (found or {}).get("metadata", {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(CLUSTER_LABEL) != cluster:
            taken.append(f"{what} (gpuforge cluster {labels.get(CLUSTER_LABEL) or 'unnamed'})")
    if taken:
        raise InputError(
            f"cluster {cluster}: {len(taken)} object(s) gpuforge would apply belong to another gpuforge cluster on "
            f"this API server: {', '.join(taken)}. Nothing was applied. Fix: point --kubeconfig/--context at "
            f"cluster {cluster}'s API server, or remove the other cluster's objects first."
        )
