"""Shared pieces of the policy tests: mocked runs of real components, catalogs, verdict readers.

Every test case is real component output: GpuCluster (or a component) built under
the Pulumi SDK's mocks (`gpuforge.pulumi_mocks`), and recorded as the engine would
receive it. A violating case changes one setting of that output the way a user
could, through a Pulumi transformation on the component, never by writing
resource dicts by hand.

One thing the engine does that the recording mocks do not is added here, with its reason:
- `PreviewMocks` answers as the engine does during `pulumi preview`: a resource
  about to be created has no id and no computed outputs yet (the AWS provider
  answers an empty id), so everything derived from them reaches the next resource
  as unknown.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockResourceArgs

from gpuforge.components import AmiPin, GpuCluster, GpuClusterSpec
from gpuforge.components.specs import NetworkSpec
from gpuforge.images.catalog import CatalogEntry, record_entry
from gpuforge.images.matrix import check_file, load_valid
from gpuforge.policies.rules_ami import image_policy_config
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource, RecordingMonitor

REPO = Path(__file__).resolve().parents[2]
SHIPPED_MATRICES = REPO / "images" / "matrices"
REGION = "us-east-1"
# A fixed "now" for Capacity Block schedules, so the tests do not age.
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _shipped_slurm() -> str:
    """The Slurm the shipped p5 image carries: what a stack passes a Slurm cluster (its matrix's slurm.version)."""
    matrix, _ = load_valid(SHIPPED_MATRICES / "p5-h100-cuda12.yaml")
    assert matrix.slurm is not None, "the shipped p5 matrix pins Slurm"
    return matrix.slurm.version


SLURM_VERSION = _shipped_slurm()

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
ASG = "aws:autoscaling/group:Group"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET = "aws:s3/bucket:Bucket"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_ENCRYPTION = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


# What a recorded run hands the policy runner: the mocks' record, property dependencies included.
Registered = RecordedResource


class PreviewMocks(GpuforgeMocks):
    """Answers a new resource as the engine does in preview: no id, no computed outputs."""

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        super().new_resource(args)  # keeps the record of what was registered
        return "", dict(args.inputs)


def record(
    build: Callable[[], object], *, preview: bool = False, mocks: GpuforgeMocks | None = None
) -> list[Registered]:
    """Run `build` as a Pulumi program under the mocks; every resource it registered, with dependencies."""
    if mocks is None:
        mocks = PreviewMocks() if preview else GpuforgeMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="gpuforge", stack="test", preview=preview, monitor=monitor)

    @pulumi.runtime.test
    def program() -> None:
        build()

    program()
    registered = []
    for resource in mocks.resources:
        assert resource.urn is not None
        if preview and resource.custom:
            # What the engine holds for a resource it has not created yet: its inputs, no id.
            resource = dataclasses.replace(resource, id="", outputs=dict(resource.inputs))
        registered.append(resource)
    assert registered, "the program registered nothing"
    return registered


def edit(token: str, *, name_suffix: str = "", **changes: Any) -> pulumi.ResourceTransformation:
    """A transformation that changes inputs (Python names) of the `token` resources under a component
    (only those whose name ends with `name_suffix`, when given).

    A value is the new input, or a function of the old one.
    """

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if args.type_ != token or not args.name.endswith(name_suffix):
            return None
        props = dict(args.props)
        for key, change in changes.items():
            props[key] = change(props.get(key)) if callable(change) else change
        return pulumi.ResourceTransformationResult(props, args.opts)

    return transform


def cluster(
    spec: GpuClusterSpec, *transformations: pulumi.ResourceTransformation
) -> Callable[[], GpuCluster]:
    """A program that builds one GpuCluster, with `transformations` applied to its resources.

    A Slurm cluster gets the shipped images' Slurm version, as the stack program passes it.
    """
    return lambda: GpuCluster(
        spec.name,
        spec,
        pulumi.ResourceOptions(transformations=list(transformations)),
        now=NOW,
        slurm_version=SLURM_VERSION if spec.scheduler.type == "slurm" else None,
    )


@dataclass(frozen=True)
class Images:
    """An image catalog in a temporary folder, with the matrices its entries were built from."""

    catalog: Path
    matrices: Path
    pins: Mapping[str, AmiPin]  # matrix file stem -> the AMI the catalog records for it in REGION

    def config(self) -> dict[str, Any]:
        return image_policy_config(self.catalog, self.matrices)


def build_images(folder: Path, extra: Mapping[str, str] | None = None) -> Images:
    """A catalog with one AMI per shipped matrix (and per `extra` matrix: stem -> YAML text) in REGION."""
    matrices = folder / "matrices"
    matrices.mkdir(parents=True)
    for source in sorted(SHIPPED_MATRICES.glob("*.yaml")):
        (matrices / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    for stem, text in (extra or {}).items():
        (matrices / f"{stem}.yaml").write_text(text, encoding="utf-8")
    catalog = folder / "catalog.json"
    pins: dict[str, AmiPin] = {}
    for number, path in enumerate(sorted(matrices.glob("*.yaml")), start=1):
        report = check_file(path)
        assert report.matrix is not None and report.digest is not None, f"{path} is not a matrix"
        ami_id = f"ami-{number:017x}"
        record_entry(
            catalog,
            CatalogEntry(
                ami_id=ami_id,
                region=REGION,
                matrix_name=report.matrix.name,
                matrix_version=report.matrix.version,
                matrix_digest=report.digest,
                built_at="2026-01-31T12:00:00+00:00",
                packer_version="1.11.2",
            ),
        )
        pins[path.stem] = AmiPin(
            ami_id=ami_id,
            region=REGION,
            matrix_name=report.matrix.name,
            matrix_version=report.matrix.version,
            matrix_digest=report.digest,
        )
    return Images(catalog, matrices, pins)


def spec(images: Images, matrix: str = "p5-h100-cuda12", **overrides: Any) -> GpuClusterSpec:
    """A cluster spec on the catalog's AMI for `matrix` (stem of a matrix file)."""
    values: dict[str, Any] = {
        "name": "demo",
        "instance_type": "p5.48xlarge",
        "node_count": 2,
        "availability_zone": f"{REGION}a",
        "ami": images.pins[matrix],
    }
    values.update(overrides)
    scheduler = values.get("scheduler")
    kind = scheduler.get("type") if isinstance(scheduler, dict) else getattr(scheduler, "type", None)
    if kind == "kubernetes" and "network" not in overrides:
        # As a stack gets it: the add-on images come from the internet (components.eks_network).
        values["network"] = NetworkSpec(api_access="nat")
    return GpuClusterSpec(**values)


def verdicts(
    resources: Sequence[Registered], images: Images | None = None, config: Mapping[str, Any] | None = None
) -> list[Verdict]:
    merged: dict[str, Any] = dict(images.config()) if images else {}
    for name, value in (config or {}).items():
        merged[name] = {**merged.get(name, {}), **value} if isinstance(value, Mapping) else value
    return run_policies(resources, merged)


def of(found: Sequence[Verdict], policy: str) -> list[Verdict]:
    return [verdict for verdict in found if verdict.policy == policy]


def mandatory(found: Sequence[Verdict]) -> list[Verdict]:
    return [verdict for verdict in found if verdict.enforcement == "mandatory"]


def named(resources: Sequence[Registered], token: str) -> Registered:
    matches = [resource for resource in resources if resource.type == token]
    assert len(matches) == 1, f"expected one {token}, found {[r.name for r in matches]}"
    return matches[0]


def record_cluster(
    spec: GpuClusterSpec, *transformations: pulumi.ResourceTransformation, preview: bool = False
) -> list[Registered]:
    if not transformations:
        return list(_clean_cluster(spec.model_dump_json(), preview))
    return record(cluster(spec, *transformations), preview=preview)


@functools.lru_cache(maxsize=32)
def _clean_cluster(spec_json: str, preview: bool) -> tuple[Registered, ...]:
    """An unchanged cluster is recorded once per spec: the records are immutable."""
    return tuple(record(cluster(GpuClusterSpec.model_validate_json(spec_json)), preview=preview))
