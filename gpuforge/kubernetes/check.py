"""`gpuforge policy kubernetes [--allow-unchecked KIND]... FILE...`: the policy pack's Kubernetes rules on manifests,
offline.

The same rule functions as under `pulumi preview --policy-pack policies/` (`gpuforge.policies.rules_kubernetes`),
on every object `kubectl apply -f FILE` would create: each document of each file, each item of a List (any
object with `items`, Lists in Lists), each component of an AppWrapper, and in each the pod templates of every
workload kind the rules know (`gpuforge.policies.kubernetes_objects`).

Exit 0 only when every object was read and no mandatory rule fails (advisories are printed). Exit 1 when a
mandatory rule fails, kubernetes-workload-checked included: a workload whose pods the rules cannot judge (a
TrainJob, an unknown kind with a pod template, an image or a GPU request) fails, because CI reads 0 as "checked".
`--allow-unchecked KIND` is the written decision to accept one kind unread: its objects are printed as "not
checked" and do not fail. Exit 2 for a file that cannot be read (gpuforge.loading's guards: size cap, not a
regular file, not UTF-8, aliases, duplicate keys, deep nesting) or a document that is not an object the API
server would take (no kind or apiVersion, a List item without one, `items` or `containers` of the wrong shape).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.display import cut, printable
from gpuforge.errors import InputError
from gpuforge.loading import load_yaml_documents

if TYPE_CHECKING:
    from gpuforge.policies.kubernetes_objects import ObjectType

_FIX_FILE = "give Kubernetes YAML, one object (or List) per document, as `kubectl apply -f` takes it"
_MAX_PROBLEMS_SHOWN = 10


@dataclass(frozen=True)
class Finding:
    """One rule's finding on one object."""

    policy: str
    mandatory: bool
    where: str
    """The file, the document's index in it and the object, e.g. `job.yaml#0 Job/train`."""
    message: str
    allowed: bool = False
    """A workload not checked, of a kind `--allow-unchecked` names: printed, not failing."""


def _object_type(obj: Mapping[str, Any], where: str) -> ObjectType:
    from gpuforge.policies.kubernetes_objects import type_of

    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        raise InputError(
            f"{where}: not a Kubernetes object (no string `kind`, found {cut(kind)}). Fix: give the object its kind."
        )
    if not isinstance(api_version, str) or not api_version:
        raise InputError(
            f"{where}: not a Kubernetes object (no string `apiVersion`, found {cut(api_version)}); kubectl refuses "
            "it. Fix: give the object its apiVersion, e.g. batch/v1 for a Job."
        )
    object_type = type_of(api_version, kind)
    if object_type is None:
        raise InputError(
            f"{where}: apiVersion {cut(api_version)} is not `[group/]version` (kubectl refuses it). Fix: write it "
            "as the kind's API reference gives it, e.g. batch/v1."
        )
    return object_type


def check_object(
    obj: Mapping[str, Any],
    where: str,
    allow_unchecked: Iterable[str] = (),
    grace_periods: Mapping[str, int] | None = None,
) -> list[Finding]:
    """Every finding of every Kubernetes rule on one object and the objects it carries.

    InputError for an object the API server would refuse where a rule reads it; a workload not checked is a
    mandatory finding unless `allow_unchecked` names its kind (`TrainJob`, or `Job.example.com` for one group's).
    `grace_periods`: the stack's QOS grace periods, for kubernetes-grace-period (nothing to compare without)."""
    # pulumi_policy: only when a check runs
    from gpuforge.policies.kubernetes_objects import unchecked_workloads, unreadable
    from gpuforge.policies.rules_kubernetes import RULES, WORKLOAD_RULE
    from gpuforge.policies.rules_kubernetes_grace import NAME as GRACE_RULE
    from gpuforge.policies.rules_kubernetes_grace import short_grace

    object_type = _object_type(obj, where)
    problems = unreadable(object_type, obj)
    if problems:
        shown = "\n".join(f"  {problem}" for problem in problems[:_MAX_PROBLEMS_SHOWN])
        more = len(problems) - _MAX_PROBLEMS_SHOWN
        raise InputError(
            f"{where}: not an object the API server would take:\n{shown}"
            + (f"\n  ... and {more} more" if more > 0 else "")
            + "\nFix: correct those fields (kubectl apply refuses them too)."
        )
    allowed = set(allow_unchecked)
    findings = [
        Finding(rule.name, rule.mandatory, where, message)
        for rule in RULES
        if rule is not WORKLOAD_RULE
        for message in rule.check(object_type, obj)
    ]
    findings += [
        Finding(GRACE_RULE, False, where, m) for m in short_grace(object_type, obj, grace_periods or {})
    ]
    for item in unchecked_workloads(object_type, obj):
        accepted = item.type.kind in allowed or f"{item.type.kind}.{item.type.group}" in allowed
        findings.append(Finding(WORKLOAD_RULE.name, not accepted, where, item.message, allowed=accepted))
    return findings


def _name(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else "?"


def check_files(
    paths: Iterable[Path], allow_unchecked: Iterable[str] = (), grace_periods: Mapping[str, int] | None = None
) -> list[Finding]:
    """Every finding on every object of `paths`; InputError before any finding for a file or object that cannot
    be read."""
    objects: list[tuple[Mapping[str, Any], str]] = []
    for path in paths:
        documents = load_yaml_documents(
            path, what="Kubernetes manifest", fix=_FIX_FILE, timestamps_as_text=True
        )
        for index, document in enumerate(documents):
            if document is None:  # an empty document: kubectl skips it too
                continue
            if not isinstance(document, Mapping):
                raise InputError(
                    f"{path}#{index}: not a Kubernetes object but {type(document).__name__}. Fix: one object a "
                    "YAML document (several objects as a List: kind: List, items: [...])."
                )
            objects.append((document, f"{path}#{index} {document.get('kind')}/{_name(document)}"))
    return [
        finding
        for obj, where in objects
        for finding in check_object(obj, where, allow_unchecked, grace_periods)
    ]


def _kind_name(text: str) -> str:
    """`--allow-unchecked`'s value: a kind (`TrainJob`), or a kind of one API group as kubectl writes a resource
    of a group (`Job.example.com`)."""
    kind, dot, group = text.partition(".")
    parts = group.split(".") if dot else []
    if not (
        kind.isascii() and kind.isalnum() and all(p.isascii() and p.replace("-", "").isalnum() for p in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"{cut(text)} is not a kind (letters and digits, e.g. TrainJob) or a kind of a group (Job.example.com)"
        )
    return text


def register(commands: Any) -> None:
    """Add `kubernetes` to `gpuforge policy`'s commands (the parser is built without importing Pulumi)."""
    check = commands.add_parser(
        "kubernetes",
        help="apply the policy pack's Kubernetes rules to manifests (images by digest, GPU pod shape)",
        description="Checks every object `kubectl apply -f` would create from each YAML file (each document, each "
        "List item, each pod template of a known workload kind) with the rules of `pulumi preview --policy-pack "
        "policies/`: kubernetes-image-digest, kubernetes-gpu-pod and kubernetes-workload-checked (mandatory), "
        "kubernetes-gpu-shm and, with --stack-dir and --stack, kubernetes-grace-period (advisory). Exit 0 only when every object was checked and no mandatory rule fails; 1 "
        "when one fails, a workload whose pods the rules cannot judge included; 2 for a file that cannot be read "
        "or a document that is not a Kubernetes object.",
    )
    check.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="Kubernetes YAML (several documents allowed)"
    )
    check.add_argument(
        "--allow-unchecked",
        action="append",
        default=[],
        type=_kind_name,
        metavar="KIND",
        help="accept objects of this kind that the rules cannot judge (TrainJob; Job.example.com for one API "
        "group's): printed as 'not checked', not failing (repeat for several kinds)",
    )
    check.add_argument(
        "--stack-dir",
        type=Path,
        metavar="DIR",
        help="with --stack: the Pulumi project whose QOS grace periods (gpuforge:scheduler.qos[].gracePeriod) "
        "kubernetes-grace-period holds team pods to",
    )
    check.add_argument("--stack", metavar="NAME", help="with --stack-dir: the stack, e.g. p5-eks")
    check.set_defaults(handler=_check)


def _refuse_read_kinds(kinds: Sequence[str]) -> None:
    """InputError for a kind whose pods the rules read: the flag would look like it turns their rules off."""
    from gpuforge.policies.kubernetes_objects import WORKLOADS

    read = sorted(
        {text for text in kinds for known in WORKLOADS if text in (known.kind, f"{known.kind}.{known.group}")}
    )
    if read:
        raise InputError(
            f"--allow-unchecked {', '.join(read)}: the rules read that kind's pods, so there is nothing to accept "
            "unchecked (the flag does not turn its rules off). Fix: leave it out of --allow-unchecked, or name a "
            "kind of another API group with its group (Job.example.com)."
        )


def _grace_periods(args: argparse.Namespace) -> dict[str, int]:
    """The stack's QOS grace periods (`--stack-dir` and `--stack` together), or none."""
    if (args.stack_dir is None) != (args.stack is None):
        raise InputError(
            "--stack-dir and --stack name one stack together. Fix: give both (e.g. --stack-dir stacks/training "
            "--stack p5-eks), or neither."
        )
    if args.stack_dir is None:
        return {}
    from gpuforge.policies.rules_kubernetes_grace import grace_periods
    from gpuforge.stack_config import load_stack_config

    return grace_periods(load_stack_config(args.stack_dir, args.stack).scheduler.qos)


def _check(args: argparse.Namespace) -> int:
    _refuse_read_kinds(args.allow_unchecked)
    findings = check_files(args.files, args.allow_unchecked, _grace_periods(args))
    for finding in findings:
        level = (
            "not checked, allowed" if finding.allowed else "mandatory" if finding.mandatory else "advisory"
        )
        print(printable(f"{finding.where}: {finding.policy} ({level}): {finding.message}"))
    failed = sum(finding.mandatory for finding in findings)
    allowed = sum(finding.allowed for finding in findings)
    advisory = len(findings) - failed - allowed
    print(
        f"{failed} mandatory, {advisory} advisory finding(s)"
        + (f", {allowed} object(s) not checked (--allow-unchecked)" if allowed else "")
        + f" in {len(args.files)} file(s)"
    )
    return 1 if failed else 0
