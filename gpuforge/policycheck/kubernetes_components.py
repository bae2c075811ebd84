"""pulumi-kubernetes under `gpuforge policy check`: the objects its components make, read offline.

Under the SDK's mocks no provider plugin runs, and none is needed: `pulumi.runtime.set_mocks` puts the SDK's
MockMonitor in place of the engine, so each registration goes to the mocks and nothing starts
`pulumi-resource-kubernetes`. A program needs only the SDK (`pip install 'gpuforge[kubernetes-iac]'`). Its
resources reach the policy pack three ways:

- a typed resource (`k8s.batch.v1.Job`, `k8s.apiextensions.CustomResource`) registers as itself, type
  `kubernetes:<group/version>:<Kind>`, inputs camelCased by the SDK: the rules read it as it is;
- the SDK's own (v1) `yaml.ConfigFile` and `yaml.ConfigGroup` hand their text to the provider function
  `kubernetes:yaml:decode` and register each object it returns as a typed child. `decode_answer` answers that
  function as the provider does (`PolicyCheckMocks`), so those children are registered and checked;
- a component the provider constructs (`remote=True` in the SDK) registers alone, with its inputs: the
  MockMonitor calls the mocks once and nothing runs the provider's Construct, which under the engine registers
  each object as a child. `expand` does what that Construct does for `yaml/v2` ConfigFile and ConfigGroup (reads
  the files, decodes the YAML, flattens Lists, names and types each object), so their objects are checked too.
  A `helm.sh/v4` Chart or a `kustomize/v2` Directory needs Helm or kustomize and the chart's repository, and a
  `helm.sh/v3` Release is installed by Helm on the cluster (its objects never reach a policy, under
  `pulumi preview` either): `expand` names each as not checked, never as a pass.

The provider's behaviour is read from github.com/pulumi/pulumi-kubernetes at 94977969d64112b04e19945818a7d5d5f38f631d:
provider/pkg/provider/yaml/v2/{configgroup,configfile,yaml}.go (Construct, Parse, yamlDecode, Normalize, expand,
register), provider/pkg/provider/invoke_decode_yaml.go (decodeYaml) and sdk/go/kubernetes/yaml/v2/kinds.go
(RegisterResource: `v1/Pod` as `kubernetes:core/v1:Pod`, any other `<apiVersion>/<Kind>` as
`kubernetes:<apiVersion>:<Kind>`).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pulumi.runtime.rpc import UNKNOWN

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import load_yaml_documents, parse_yaml_documents
from gpuforge.policycheck.answers import YAML_DECODE
from gpuforge.pulumi_mocks import RecordedResource

CONFIG_GROUP: Final = "kubernetes:yaml/v2:ConfigGroup"
CONFIG_FILE: Final = "kubernetes:yaml/v2:ConfigFile"
# Components whose objects a tool makes in the provider or on the cluster: nothing offline can make them.
RENDERED: Final = {
    "kubernetes:helm.sh/v4:Chart": (
        "the provider renders the chart's objects with Helm (from its repository, with its values) and registers "
        "each; offline nothing renders it, so the policies never saw them. Under `pulumi preview --policy-pack "
        "policies/` they are checked one by one"
    ),
    "kubernetes:kustomize/v2:Directory": (
        "the provider builds the kustomization with kustomize and registers each object; offline nothing builds "
        "it, so the policies never saw them. Under `pulumi preview --policy-pack policies/` they are checked one "
        "by one"
    ),
    "kubernetes:helm.sh/v3:Release": (
        "Helm installs the release on the cluster, so its objects never reach a policy, offline or under "
        "`pulumi preview`. Check the chart's rendered objects (`helm template ... > out.yaml`, then "
        "`gpuforge policy kubernetes out.yaml`), or deploy it as a helm.v4.Chart, whose objects the policy pack sees"
    ),
}
# Lists inside Lists, at most this deep (the provider has no bound; a check must have one).
MAX_NESTING: Final = 8
# The YAML parser is pure Python (gpuforge.loading, about 150 KiB a second): the cap bounds a check's time.
MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024
# Go's url.Parse(file).IsAbs(): the text starts with a scheme.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# yaml.go isGlobPattern: an unescaped `*`, `?` or `[`.
_GLOB = re.compile(r"(?:^|[^\\])[*?\[]")


@dataclass(frozen=True)
class NotChecked:
    """A resource whose Kubernetes objects the policies did not see, and why."""

    urn: str
    type: str
    name: str
    reason: str


@dataclass(frozen=True)
class Expanded:
    """The run's resources with the objects of its yaml/v2 components, and what could not be read."""

    resources: tuple[RecordedResource, ...]
    not_checked: tuple[NotChecked, ...]


def decode(text: str, *, source: str, fix: str) -> list[dict[str, Any]]:
    """The provider's `kubernetes:yaml:decode`: each document of a YAML (or JSON) stream that names a kind and an
    apiVersion, in order; documents without them are skipped, as the provider skips them."""
    return [
        document
        for document in _documents(text, source=source, fix=fix)
        if _text(document.get("kind")) and _text(document.get("apiVersion"))
    ]


def decode_answer(args: Mapping[str, Any], program: Path, where: str) -> dict[str, Any]:
    """The result of `kubernetes:yaml:decode` for `args` ({"text": ...}), as the provider returns it; `where`
    is the program's line that called it, when known."""
    text = args.get("text")
    fix = (
        "correct the YAML the yaml.ConfigFile or yaml.ConfigGroup reads; `pulumi preview` fails on it as well"
    )
    if not isinstance(text, str):
        raise InputError(f"{program}{where}: {YAML_DECODE} got {cut(repr(text))}, not a string. Fix: {fix}.")
    # The SDK reads the file itself and passes only its text: the text's start tells which one it was.
    source = (
        f"{program}{where}: the YAML a yaml.ConfigFile or yaml.ConfigGroup read (starting {cut(text, 40)})"
    )
    if len(text.encode()) > MAX_MANIFEST_BYTES:
        raise InputError(f"{source}: more than {MAX_MANIFEST_BYTES} bytes. Fix: split it into smaller files.")
    return {"result": decode(text, source=source, fix=fix)}


def _documents(text: str, *, source: str, fix: str) -> list[dict[str, Any]]:
    """The non-empty documents of a stream, each a mapping (the provider's decoder refuses any other)."""
    return _mappings(parse_yaml_documents(text, source=source, fix=fix, timestamps_as_text=True), source, fix)


def _mappings(documents: list[Any], source: str, fix: str) -> list[dict[str, Any]]:
    """`documents` less the empty ones (yamlDecode skips them); InputError for one that is not a mapping."""
    found = []
    for index, document in enumerate(documents):
        if document is None or document == {}:
            continue
        if not isinstance(document, dict):
            raise InputError(
                f"{source}#{index}: a {type(document).__name__}, not a Kubernetes object. Fix: {fix}."
            )
        found.append(document)
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def expand(resources: Sequence[RecordedResource], directory: Path) -> Expanded:
    """`resources` with, after each yaml/v2 ConfigFile or ConfigGroup, the objects the provider registers as its
    children; `directory` is the program's working directory, against which relative files are read."""
    expanded: list[RecordedResource] = []
    not_checked: list[NotChecked] = []
    seen = {resource.urn for resource in resources}
    for resource in resources:
        expanded.append(resource)
        if resource.type in RENDERED:
            not_checked.append(_not_checked(resource, RENDERED[resource.type]))
        if resource.type not in (CONFIG_GROUP, CONFIG_FILE):
            continue
        component = _Component(resource, directory)
        for child in component.children():
            if child.urn in seen:
                raise component.error(
                    f"two objects make the resource {child.name!r} ({child.type})",
                    "give each object its own metadata.name (or namespace); the engine refuses a duplicate URN",
                )
            seen.add(child.urn)
            expanded.append(child)
        not_checked += [_not_checked(resource, reason) for reason in component.unread]
    return Expanded(tuple(expanded), tuple(not_checked))


def _not_checked(resource: RecordedResource, reason: str) -> NotChecked:
    return NotChecked(resource.urn or "", resource.type, resource.name, reason)


class _Component:
    """One yaml/v2 ConfigFile or ConfigGroup: its objects, as the provider's Construct makes them."""

    def __init__(self, resource: RecordedResource, directory: Path) -> None:
        self.resource = resource
        self.directory = directory
        self.unread: list[str] = []

    def error(self, problem: str, fix: str) -> InputError:
        return InputError(
            f"{self.resource.type} {self.resource.name}: {problem}. Fix: {fix} (the provider refuses it under "
            "`pulumi up` as well)."
        )

    def children(self) -> Iterator[RecordedResource]:
        inputs = self.resource.inputs
        if _holds_unknown(inputs):
            self.unread.append(
                "its inputs are not known until deployment, so its objects cannot be read offline"
            )
            return
        # The component's name is the prefix unless resourcePrefix is given ("" gives none).
        prefix = inputs.get("resourcePrefix", self.resource.name)
        for obj in self._flattened(self._objects(), 0):
            yield self._child(obj, str(prefix or ""))

    def _objects(self) -> Iterator[Any]:
        """Files first, then the YAML text, then `objs` (a ConfigGroup's order); a ConfigFile has one file."""
        inputs = self.resource.inputs
        group = self.resource.type == CONFIG_GROUP
        files = (inputs.get("files") or []) if group else [inputs.get("file")]
        if not isinstance(files, list):
            raise self.error(f"files is {cut(repr(files))}", "give a list of paths")
        for file in files:
            if not isinstance(file, str) or not file:
                raise self.error(f"a file is {cut(repr(file))}", "name each manifest by its path")
            yield from self._file_objects(file, glob_=group)
        text = inputs.get("yaml") if group else None
        if text is not None and not isinstance(text, str):
            raise self.error(f"yaml is {cut(repr(text))}", "give the manifest's text")
        if text:
            yield from _documents(
                text, source=f"{self.resource.type} {self.resource.name}, yaml", fix="correct the YAML"
            )
        objs = (inputs.get("objs") or []) if group else []
        if not isinstance(objs, list):
            raise self.error(f"objs is {cut(repr(objs))}", "give a list of Kubernetes objects")
        yield from objs

    def _file_objects(self, file: str, *, glob_: bool) -> Iterator[Any]:
        if _URL.match(file):
            self.unread.append(
                f"it reads {cut(file)} over the network when the provider runs, which the offline check does not "
                "fetch. Fix: keep the manifest in the repository and name it by path"
            )
            return
        if glob_ and _GLOB.search(file):
            # glob.glob, not Path.glob: like Go's filepath.Glob it takes absolute patterns, reads `**` as `*` and
            # (include_hidden) matches names that start with a dot. The provider sorts the matches.
            found = glob.glob(file, root_dir=self.directory, include_hidden=True)  # noqa: PTH207
            paths = [self.directory / match for match in sorted(found)]
        else:
            paths = [self.directory / file]
        what = f"manifest the {self.resource.type} {self.resource.name} reads"
        fix = "give the component a readable Kubernetes YAML file, by a path relative to the program's folder"
        for path in paths:
            documents = load_yaml_documents(
                path, what=what, fix=fix, max_bytes=MAX_MANIFEST_BYTES, timestamps_as_text=True
            )
            yield from _mappings(documents, str(path), f"correct the {what}")

    def _flattened(self, objects: Iterator[Any], depth: int) -> Iterator[dict[str, Any]]:
        """Each object, a List's items in its place (yaml.go expand: any object whose `items` is a list)."""
        for obj in objects:
            if not isinstance(obj, Mapping):
                raise self.error(f"an object is {cut(repr(obj))}", "give Kubernetes objects (mappings)")
            items = obj.get("items")
            if not isinstance(items, list):
                yield dict(obj)
            elif depth >= MAX_NESTING:
                raise self.error(f"Lists nested more than {MAX_NESTING} deep", "flatten the Lists")
            else:
                yield from self._flattened(iter(items), depth + 1)

    def _child(self, obj: dict[str, Any], prefix: str) -> RecordedResource:
        shown = cut(repr(obj))
        api_version, kind = _text(obj.get("apiVersion")), _text(obj.get("kind"))
        if api_version is None or kind is None:
            raise self.error(f"the object {shown} has no kind or apiVersion", "give every object both")
        metadata = obj.get("metadata")
        name = _text(metadata.get("name")) if isinstance(metadata, Mapping) else None
        if name is None or not isinstance(metadata, Mapping):
            raise self.error(f"the object {shown} has no .metadata.name", "name every object")
        namespace = _text(metadata.get("namespace"))
        object_name = f"{namespace}/{name}" if namespace else name
        resource_name = f"{prefix}:{object_name}" if prefix else object_name
        group_version = "core/v1" if api_version in ("v1", "core/v1") else api_version
        resource_type = f"kubernetes:{group_version}:{kind}"
        return RecordedResource(
            type=resource_type,
            name=resource_name,
            inputs=obj,
            outputs=obj,
            id=object_name,
            urn=_child_urn(self.resource.urn or "", resource_type, resource_name),
            parent_urn=self.resource.urn,
            custom=True,
        )


def _child_urn(parent: str, resource_type: str, name: str) -> str:
    """The URN the SDK's MockMonitor gives a child (`make_urn`): the parent's own type, `$`, the child's."""
    head, project, qualified, _ = parent.split("::", 3)
    return "::".join((head, project, f"{qualified.split('$')[-1]}${resource_type}", name))


def _holds_unknown(value: Any) -> bool:
    if value == UNKNOWN:
        return True
    if isinstance(value, Mapping):
        return any(_holds_unknown(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_unknown(item) for item in value)
    return False
