"""AMI rules: every node boots an AMI the image catalog records for a matrix that passes its check.

"Reject unpinned stacks": an AMI id that the catalog does not record, one that an
SSM parameter resolves at launch ("latest"), one that is not a literal at preview
(a lookup or another resource's output) and one whose matrix fails
`gpuforge matrix check` are all rejected. A `most_recent` AMI lookup returns an
id the catalog does not record, so it fails the same way.

The advisory rule warns while a pinned AMI's driver branch nears its end of life,
using the same data and rule as `gpuforge matrix check`, with the warning window
as policy config.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpuforge.compat import compat
from gpuforge.errors import InputError, Severity
from gpuforge.images.rules import rule_driver_eol
from gpuforge.policies.node_settings import AMI_FIELD, NodeSettings
from gpuforge.policies.pinned_images import CATALOG_KEY, CONFIG_PROPERTIES, MATRICES_KEY, ImageSources
from gpuforge.policies.props import UNKNOWN, at, text

SSM_PREFIX = "resolve:ssm:"
# A launch template's image id may name an SSM parameter that EC2 resolves at launch.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-launch-template.html
#         ("Use a Systems Manager parameter instead of an AMI ID")
SSM_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-launch-template.html"
PIN_FIX = (
    "use the AMI id that the image catalog records for the stack's matrix and region "
    "(GpuCluster takes it from the catalog; build one with `gpuforge image build MATRIX`)"
)

WARN_DAYS_KEY = "warnDaysBeforeEol"
REGION_KEY = "region"
REGION_PROPERTY = {
    "type": "string",
    "description": "The region the stack deploys to. A node's AMI must be catalogued in the region the node "
    "launches in: its own `region` (pulumi-aws 7), else its provider's, else this one; when none is known "
    "(empty here), any region of the catalog passes. gpuforge policy check sets it from the program's "
    "aws:region.",
    "default": "",
}


def _node_amis(args: ResourceValidationArgs) -> list[tuple[str | None, str | None]]:
    """`_node_ami` of every node the resource describes (`NodeSettings.each`)."""
    return [_node_ami(node) for node in NodeSettings.each(args)]


def _node_ami(node: NodeSettings) -> tuple[str | None, str | None]:
    """(literal AMI id, None) for a node that names one, (None, why it is not pinned) for a node
    that does not, and (None, None) where the rule does not apply."""
    field = AMI_FIELD[node.resource_type]
    value = text(node.get(field))
    name = node.field(field)
    if value is None:
        if not node.is_template and not node.from_template:
            return None, f"the {node.kind} sets no {name} and no launch template. Fix: {PIN_FIX}."
        # A template without an image id leaves it to the instance that uses it, which is checked itself.
        return None, None
    if value is UNKNOWN:
        return None, (
            f"{name} is not known at preview: it comes from another resource or a lookup, so no one can "
            f"tell which AMI the nodes boot. A pinned AMI is a literal id. Fix: {PIN_FIX}."
        )
    if value.startswith(SSM_PREFIX):
        return None, (
            f"{name} {value!r} resolves an SSM parameter when each node launches, so the AMI can change "
            f"under the stack (source: {SSM_SOURCE}). Fix: {PIN_FIX}."
        )
    return value, None


def validate_ami(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for ami_id, problem in _node_amis(args):
        _judge_ami(args, ami_id, problem, report)


def _judge_ami(
    args: ResourceValidationArgs, ami_id: str | None, problem: str | None, report: ReportViolation
) -> None:
    if problem is not None:
        report(problem, None)
    if ami_id is None:
        return
    sources = ImageSources.from_config(args.get_config())
    try:
        pinned = sources.pinned(ami_id)
    except InputError as error:
        report(f"cannot check the AMI {ami_id!r}: {error.message}", None)
        return
    if not pinned:
        report(
            f"AMI {ami_id!r} is not in the image catalog {sources.catalog_path} "
            f"({sources.recorded()} AMIs recorded), so nothing says which drivers, CUDA and EFA it holds. "
            f"Fix: {PIN_FIX}.",
            None,
        )
        return
    region = _node_region(args)
    if region is not None and not any(image.entry.region == region for image in pinned):
        where = ", ".join(sorted({image.entry.region for image in pinned}))
        report(
            f"AMI {ami_id!r} is catalogued in {where} only, and this node launches in {region}: an AMI id "
            f"names an image in one region, and {region} has no AMI of that id from the catalog. Fix: copy "
            f"the image (`gpuforge image build MATRIX --copy-to {region}`) and use the id the catalog records "
            f"for {region}.",
            None,
        )
        return
    pinned = [image for image in pinned if region is None or image.entry.region == region]
    if any(image.matrix is not None and image.matrix.ok for image in pinned):
        return
    for image in pinned:
        entry = image.entry
        built = f"AMI {ami_id!r} was built from matrix {entry.matrix_name} {entry.matrix_version}"
        if image.matrix is None:
            unreadable = sources.matrices().unreadable
            extra = f" (files that are not valid matrices: {', '.join(unreadable)})" if unreadable else ""
            report(
                f"{built} (digest {entry.matrix_digest[:12]}), but no matrix under {sources.matrices_dir} "
                f"has that digest{extra}: the matrix changed or is gone. Fix: rebuild the image from the "
                "current matrix and use its AMI, or restore the matrix the AMI was built from.",
                None,
            )
            continue
        errors = [f.render() for f in image.matrix.findings if f.severity is Severity.ERROR]
        report(
            f"{built} ({image.matrix.path}), which fails `gpuforge matrix check` with "
            f"{len(errors)} error(s): {'; '.join(errors)}. Fix: correct the matrix, rebuild the image "
            "and use the new AMI from the catalog.",
            None,
        )


def _node_region(args: ResourceValidationArgs) -> str | None:
    """The region a node launches in: its own `region` input (pulumi-aws 7), its provider's (under the
    engine), else the policy's config; None when none says."""
    own = text(at(args.props, "region"))
    if isinstance(own, str) and own:
        return own
    provider = getattr(args, "provider", None)
    from_provider = text(at(provider.props, "region")) if provider is not None else None
    if isinstance(from_provider, str) and from_provider:
        return from_provider
    configured = args.get_config().get(REGION_KEY)
    return str(configured) if configured else None


def validate_driver_eol(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # An AMI that is not pinned is ami-pinned's verdict.
    for ami_id in sorted({ami_id for ami_id, _ in _node_amis(args) if ami_id is not None}):
        _driver_eol(args, ami_id, report)


def _driver_eol(args: ResourceValidationArgs, ami_id: str, report: ReportViolation) -> None:
    sources = ImageSources.from_config(args.get_config())
    try:
        pinned = sources.pinned(ami_id)
    except InputError:
        return  # an unreadable catalog is ami-pinned's verdict
    days = int(args.get_config()[WARN_DAYS_KEY])
    data = compat()
    data = data.model_copy(
        update={"driver_branches": data.driver_branches.model_copy(update={"warn_days_before_eol": days})}
    )
    for image in pinned:
        if image.matrix is None or image.matrix.matrix is None:
            continue
        for finding in rule_driver_eol(image.matrix.matrix, data, date.today()):
            if finding.severity is Severity.WARNING:
                report(
                    f"AMI {ami_id!r} (matrix {image.entry.matrix_name} {image.entry.matrix_version}): "
                    f"{finding.message} (source: {finding.source})",
                    None,
                )


def _config(extra: dict[str, dict[str, Any]] | None = None) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties={**CONFIG_PROPERTIES, **(extra or {})})


AMI_PINNED = ResourceValidationPolicy(
    name="ami-pinned",
    description=(
        "Every EC2 instance and launch template boots an AMI that the image catalog records for a "
        "matrix that passes `gpuforge matrix check`. Instead of an unknown id, a most_recent lookup or "
        "an SSM 'latest' parameter, use the catalog's AMI id for the stack's matrix and region."
    ),
    validate=validate_ami,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=_config({REGION_KEY: REGION_PROPERTY}),
)

DRIVER_BRANCH_EOL = ResourceValidationPolicy(
    name="driver-branch-eol",
    description=(
        "The pinned AMI's NVIDIA driver branch is near or past its end of life. Plan the move to a supported "
        "Long Term Support branch: update the matrix's driver, rebuild the image and roll the nodes."
    ),
    validate=validate_driver_eol,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=_config(
        {
            WARN_DAYS_KEY: {
                "type": "integer",
                "minimum": 0,
                "description": "Warn this many days before a driver branch's end of life.",
                "default": compat().driver_branches.warn_days_before_eol,
            }
        }
    ),
)


def image_policy_config(
    catalog_path: Path | None = None, matrices_dir: Path | None = None
) -> dict[str, dict[str, str]]:
    """Policy config that points both AMI policies at a catalog and a matrices folder.

    For `gpuforge plan --catalog` and `pulumi preview --policy-pack-config`: a stack that
    takes its AMI from another catalog must be checked against that catalog.
    """
    values: dict[str, str] = {}
    if catalog_path is not None:
        values[CATALOG_KEY] = str(catalog_path.expanduser().resolve())
    if matrices_dir is not None:
        values[MATRICES_KEY] = str(matrices_dir.expanduser().resolve())
    return {AMI_PINNED.name: dict(values), DRIVER_BRANCH_EOL.name: dict(values)}
