"""`gpuforge policy kubernetes FILE...`: the policy pack's Kubernetes rules on manifests, offline.

The same rule functions as under `pulumi preview --policy-pack policies/` (`gpuforge.policies.rules_kubernetes`),
applied to each YAML document of each file: a job a user is about to submit, or what `scheduler render` wrote.
Exit 0 when no mandatory rule fails (advisories are printed), 1 when one does, 2 for a file that cannot be read
or a document that is not a Kubernetes object.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuforge.errors import InputError


@dataclass(frozen=True)
class Finding:
    """One rule's finding on one object."""

    policy: str
    mandatory: bool
    where: str
    """The file, the document's index in it and the object, e.g. `job.yaml#0 Job/train`."""
    message: str


def check_object(obj: Mapping[str, Any], where: str) -> list[Finding]:
    """Every finding of every Kubernetes rule on one object."""
    from gpuforge.policies.rules_kubernetes import RULES  # pulumi_policy: only when a check runs

    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise InputError(
            f"{where}: not a Kubernetes object (no string `kind`). Fix: give the object its kind."
        )
    return [
        Finding(rule.name, rule.mandatory, where, message)
        for rule in RULES
        for message in rule.check(kind, obj)
    ]


def _documents(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error}). Fix: give a readable UTF-8 YAML file.") from None
    try:
        return [document for document in yaml.safe_load_all(text) if document is not None]
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not YAML ({error}). Fix: correct the file.") from None


def check_files(paths: Iterable[Path]) -> list[Finding]:
    """Every finding on every object of `paths`; InputError before any finding for an unreadable file."""
    objects: list[tuple[Mapping[str, Any], str]] = []
    for path in paths:
        for index, document in enumerate(_documents(path)):
            if not isinstance(document, Mapping):
                raise InputError(
                    f"{path}#{index}: not a Kubernetes object but {type(document).__name__}. Fix: one object a "
                    "YAML document (a List's items as documents of their own)."
                )
            name = (
                document.get("metadata", {}).get("name", "?")
                if isinstance(document.get("metadata"), Mapping)
                else "?"
            )
            objects.append((document, f"{path}#{index} {document.get('kind')}/{name}"))
    return [finding for obj, where in objects for finding in check_object(obj, where)]


def register(commands: Any) -> None:
    """Add `kubernetes` to `gpuforge policy`'s commands (the parser is built without importing Pulumi)."""
    check = commands.add_parser(
        "kubernetes",
        help="apply the policy pack's Kubernetes rules to manifests (images by digest, GPU pod shape)",
        description="Checks each object of each YAML file with the rules of `pulumi preview --policy-pack "
        "policies/`: kubernetes-image-digest and kubernetes-gpu-pod (mandatory), kubernetes-gpu-shm (advisory). "
        "Exit 0 when no mandatory rule fails, 1 when one does, 2 for a file that cannot be read or a document "
        "that is not a Kubernetes object.",
    )
    check.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="Kubernetes YAML (several documents allowed)"
    )
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    findings = check_files(args.files)
    for finding in findings:
        level = "mandatory" if finding.mandatory else "advisory"
        print(f"{finding.where}: {finding.policy} ({level}): {finding.message}")
    failed = sum(finding.mandatory for finding in findings)
    print(f"{failed} mandatory, {len(findings) - failed} advisory finding(s) in {len(args.files)} file(s)")
    return 1 if failed else 0
