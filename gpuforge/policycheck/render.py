"""What `gpuforge policy check` prints: the JSON document and the text view of a PolicyCheck.

The JSON shape is a contract (scripts and CI read it); `resources` and `policies` are
the entries of `gpuforge plan --json`:

    {"project": str, "stack": str,
     "program": str,                                               # the file that ran
     "config_file": str | null,                                    # the stack's config file
     "region": str,                                                # aws:region, or the mocks' default
     "catalog": str,                                               # the AMI catalog checked against
     "resources": [{"urn", "type", "name", "parent", "inputs"}],   # sorted by URN
     "lookups": [{"function", "call", "ami", "pinned", "reason"}],  # each get_ami, in call order
     "policies": [{"policy", "enforcement", "urn", "message"}],
     "not_checked": [{"urn", "type", "name", "reason"}]}             # objects the policies did not see

`not_checked` names each resource whose Kubernetes objects no policy saw (a Helm chart the provider
would render, a manifest fetched over the network; see `kubernetes_components`); it fails nothing,
and the text view lists it after the verdicts.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gpuforge.display import printable
from gpuforge.plan.render import resource_document, resource_tree, result_line, verdict_lines
from gpuforge.policycheck.answers import GET_AMI
from gpuforge.policycheck.check import PolicyCheck
from gpuforge.stack_config import display_path


def check_document(result: PolicyCheck) -> dict[str, Any]:
    """The `--json` document; see the module docstring for its shape."""
    project = result.project
    resources = sorted(result.resources, key=lambda resource: resource.urn or "")
    return {
        "project": project.name,
        "stack": project.stack,
        "program": str(project.program),
        "config_file": str(project.config_file) if project.config_file else None,
        "region": project.region,
        "catalog": str(result.catalog),
        "resources": [resource_document(resource) for resource in resources],
        "lookups": [
            {
                "function": GET_AMI,
                "call": lookup.describe(),
                "ami": lookup.ami_id,
                "pinned": lookup.pinned,
                "reason": lookup.reason,
            }
            for lookup in result.lookups
        ],
        "policies": [asdict(verdict) for verdict in result.verdicts],
        "not_checked": [asdict(entry) for entry in result.not_checked],
    }


def render_text(result: PolicyCheck) -> str:
    """For a person: header, resource tree, AMI lookups, policy verdicts, result."""
    project = result.project
    config = display_path(project.config_file) if project.config_file else "none"
    lines = [
        f"Program   {display_path(project.program)}, project {project.name}, stack {project.stack}",
        f"Config    {config}; region {project.region}",
        f"Catalog   {display_path(result.catalog)}",
        "",
        *resource_tree(result.run.mocks, project=project.name, stack=project.stack),
        "",
        "AMI lookups",
    ]
    if not result.lookups:
        lines.append("  none")
    for lookup in result.lookups:
        state = "pinned" if lookup.pinned else "NOT PINNED"
        lines.append(f"  {lookup.describe()} -> {lookup.ami_id}: {state}, {lookup.reason}")
    lines += ["", *verdict_lines(result.verdicts, result.resources)]
    if result.not_checked:
        lines += ["", "Not checked (no policy saw their Kubernetes objects)"]
        lines += [
            f"  {printable(e.type)} {printable(e.name)}: {printable(e.reason)}" for e in result.not_checked
        ]
    lines += ["", result_line(result.verdicts)]
    return "\n".join(lines)
