"""FSx for Lustre rules: what CreateFileSystem and CreateDataRepositoryAssociation accept.

Pulumi's mocks validate nothing, so every value AWS would refuse is refused here,
at construction. Each number carries its source; tests read botocore's FSx model
to confirm the enumerations and the documented values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuforge.components.input_errors import invalid

if TYPE_CHECKING:
    from gpuforge.components.specs import LustreSpec

# Source for the storage, throughput, version and KMS rules below: the FSx API reference,
# CreateFileSystem (StorageCapacity, FileSystemTypeVersion, KmsKeyId) and
# CreateFileSystemLustreConfiguration (PerUnitStorageThroughput, ImportPath, AutoImportPolicy),
# https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html and
# https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html
API_SOURCE = (
    "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html"
)
CAPACITY_SOURCE = "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html"
DRA_SOURCE = "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateDataRepositoryAssociation.html"
EFA_SOURCE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/increase-storage-capacity.html"

PERSISTENT_TYPES = frozenset({"PERSISTENT_1", "PERSISTENT_2"})
SCRATCH_TYPES = frozenset({"SCRATCH_1", "SCRATCH_2"})

# "For SCRATCH_2, PERSISTENT_2, and PERSISTENT_1 deployment types using SSD storage type, the
# valid values are 1200 GiB, 2400 GiB, and increments of 2400 GiB. [...] For SCRATCH_1
# deployment type, valid values are 1200 GiB, 2400 GiB, and increments of 3600 GiB."
SSD_CAPACITY_INCREMENT_GIB = {"PERSISTENT_2": 2400, "SCRATCH_2": 2400, "SCRATCH_1": 3600}
SSD_CAPACITY_SMALL_GIB = (1200, 2400)

# "For PERSISTENT_2 SSD storage: 125, 250, 500, 1000 MB/s/TiB."
PERSISTENT_2_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)

# EFA-enabled file systems grow in steps that depend on the throughput tier: multiples of
# 38400 GiB at 125 MB/s/TiB, 19200 at 250, 9600 at 500 and 4800 at 1000.
# Source: EFA_SOURCE (Amazon FSx for Lustre User Guide, "Increasing storage capacity").
EFA_CAPACITY_STEP_GIB = {125: 38400, 250: 19200, 500: 9600, 1000: 4800}

# Metadata IOPS for SSD file systems: "1500, 3000, 6000, 12000, and multiples of 12000 up to
# a maximum of 192000".
# Source: https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreMetadataConfiguration.html
METADATA_IOPS_SMALL = (1500, 3000, 6000)
METADATA_IOPS_STEP = 12000
METADATA_IOPS_MAX = 192000

# Baseline disk throughput of SCRATCH_2, per TiB of storage (SCRATCH types take no
# PerUnitStorageThroughput). Source: "Performance characteristics of SSD and HDD storage
# classes", https://docs.aws.amazon.com/fsx/latest/LustreGuide/ssd-storage.html
SCRATCH_2_BASELINE_PER_TIB = 200


def data_repository_association_supported(spec: LustreSpec) -> bool:
    """DRAs "are supported on all FSx for Lustre 2.12 and 2.15 file systems, excluding
    scratch_1 deployment type" (DRA_SOURCE)."""
    return spec.deployment_type != "SCRATCH_1" and spec.lustre_version in ("2.12", "2.15")


def valid_ssd_capacity(deployment_type: str, capacity_gib: int) -> bool:
    if capacity_gib in SSD_CAPACITY_SMALL_GIB:
        return True
    increment = SSD_CAPACITY_INCREMENT_GIB[deployment_type]
    return capacity_gib > 0 and capacity_gib % increment == 0


def baseline_throughput_mbps(spec: LustreSpec) -> int | None:
    """The file system's baseline throughput in MB/s, or None where AWS gives no per-TiB figure.

    AWS computes throughput as storage (TiB) x per-unit throughput, and its own example
    counts 2400 GiB as 2.4 TiB ("For a 2.4-TiB file system, provisioning 50 MB/s/TiB [...]
    yields 120 MB/s", API_SOURCE), so the storage is divided by 1000 here, as AWS does.
    """
    per_tib = spec.throughput_per_tib
    if spec.deployment_type == "SCRATCH_2":
        per_tib = SCRATCH_2_BASELINE_PER_TIB
    if per_tib is None:
        return None
    return spec.storage_capacity_gib * per_tib // 1000


def check_cluster_link(spec: LustreSpec, *, has_bucket: bool) -> None:
    """Refuse a cluster file system that would get no S3 link at all.

    A cluster links its file system to its bucket through a DRA when the spec names no link of its
    own; SCRATCH_1 (and Lustre 2.10) cannot take a DRA, so without `import_path` the file system
    would silently stay unlinked and the mandatory fsx-s3-link policy would refuse the stack.
    """
    if (
        has_bucket
        and spec.s3_path is None
        and spec.import_path is None
        and not data_repository_association_supported(spec)
    ):
        raise invalid(
            "lustre.deployment_type",
            spec.deployment_type,
            f"the cluster links its file system to its bucket through a data repository association, and "
            f"{spec.deployment_type} on Lustre {spec.lustre_version} cannot take one (DRAs work on 2.12 and "
            "2.15 file systems except SCRATCH_1), so the file system would have no S3 link",
            "use SCRATCH_2 or PERSISTENT_2 on Lustre 2.15; or, on SCRATCH_1 (a GpuClusterSpec built in code), "
            "set import_path (and export_path) to the bucket",
            source=DRA_SOURCE,
        )


def check(spec: LustreSpec, *, data_repository_association: bool) -> None:
    """Refuse any LustreSpec that CreateFileSystem or CreateDataRepositoryAssociation would refuse.

    `data_repository_association` says whether the file system gets a DRA (on a cluster it
    may link the cluster's bucket even when `spec.s3_path` is empty).
    """
    _check_capacity(spec)
    _check_throughput(spec)
    _check_version(spec)
    _check_metadata(spec)
    _check_link(spec, data_repository_association)
    _check_efa(spec)
    if spec.kms_key_arn is not None and spec.deployment_type not in PERSISTENT_TYPES:
        raise invalid(
            "lustre.kms_key_arn",
            spec.kms_key_arn,
            f"a customer KMS key is only for PERSISTENT types; {spec.deployment_type} is always "
            "encrypted at rest with the FSx service key",
            "remove kms_key_arn, or use PERSISTENT_2",
            source=CAPACITY_SOURCE,
        )


def _check_capacity(spec: LustreSpec) -> None:
    if spec.efa_enabled:
        return  # EFA-enabled file systems have their own steps, checked in _check_efa
    if not valid_ssd_capacity(spec.deployment_type, spec.storage_capacity_gib):
        increment = SSD_CAPACITY_INCREMENT_GIB[spec.deployment_type]
        raise invalid(
            "lustre.storage_capacity_gib",
            spec.storage_capacity_gib,
            f"{spec.deployment_type} on SSD takes 1200, 2400 or a multiple of {increment} GiB",
            f"round up to the next valid size ({_next_valid_capacity(spec)} GiB)",
            source=CAPACITY_SOURCE,
        )


def _next_valid_capacity(spec: LustreSpec) -> int:
    for small in SSD_CAPACITY_SMALL_GIB:
        if spec.storage_capacity_gib <= small:
            return small
    increment = SSD_CAPACITY_INCREMENT_GIB[spec.deployment_type]
    return -(-spec.storage_capacity_gib // increment) * increment


def _check_throughput(spec: LustreSpec) -> None:
    value = spec.throughput_per_tib
    if spec.deployment_type in SCRATCH_TYPES:
        if value is not None:
            raise invalid(
                "lustre.throughput_per_tib",
                value,
                f"per-unit storage throughput is only for PERSISTENT types; {spec.deployment_type} "
                "has a fixed baseline",
                "remove throughput_per_tib, or use PERSISTENT_2",
                source=API_SOURCE,
            )
        return
    if value not in PERSISTENT_2_THROUGHPUT_PER_TIB:
        raise invalid(
            "lustre.throughput_per_tib",
            value,
            f"PERSISTENT_2 on SSD requires one of {list(PERSISTENT_2_THROUGHPUT_PER_TIB)} MB/s/TiB",
            "pick one of those values",
            source=API_SOURCE,
        )


def _check_version(spec: LustreSpec) -> None:
    # "2.10 is supported by the Scratch and Persistent_1 Lustre deployment types. 2.12 is
    # supported by all Lustre deployment types, except for PERSISTENT_2 with a metadata
    # configuration mode. 2.15 is supported by all Lustre deployment types" (CAPACITY_SOURCE).
    if spec.lustre_version == "2.10" and spec.deployment_type == "PERSISTENT_2":
        raise invalid(
            "lustre.lustre_version",
            spec.lustre_version,
            "PERSISTENT_2 does not run Lustre 2.10",
            "use 2.15",
            source=CAPACITY_SOURCE,
        )
    if spec.lustre_version == "2.12" and spec.metadata_mode is not None:
        raise invalid(
            "lustre.lustre_version",
            spec.lustre_version,
            "a metadata configuration needs Lustre 2.15",
            "use 2.15",
            source=CAPACITY_SOURCE,
        )


def _check_metadata(spec: LustreSpec) -> None:
    if spec.metadata_mode is not None and spec.deployment_type != "PERSISTENT_2":
        raise invalid(
            "lustre.metadata_mode",
            spec.metadata_mode,
            "a metadata configuration is only for PERSISTENT_2",
            "remove metadata_mode, or use PERSISTENT_2",
            source=API_SOURCE,
        )
    iops = spec.metadata_iops
    if spec.metadata_mode == "USER_PROVISIONED":
        valid = iops is not None and (
            iops in METADATA_IOPS_SMALL or (iops % METADATA_IOPS_STEP == 0 and 0 < iops <= METADATA_IOPS_MAX)
        )
        if not valid:
            raise invalid(
                "lustre.metadata_iops",
                iops,
                "USER_PROVISIONED metadata takes 1500, 3000, 6000, 12000 or a multiple of 12000 "
                f"up to {METADATA_IOPS_MAX} IOPS",
                "pick one of those values, or use metadata_mode: AUTOMATIC",
                source="https://docs.aws.amazon.com/fsx/latest/APIReference/"
                "API_CreateFileSystemLustreMetadataConfiguration.html",
            )
    elif iops is not None:
        raise invalid(
            "lustre.metadata_iops",
            iops,
            "metadata IOPS are only given in USER_PROVISIONED mode",
            "remove metadata_iops, or set metadata_mode: USER_PROVISIONED",
        )


def _check_link(spec: LustreSpec, dra: bool) -> None:
    legacy = spec.import_path is not None or spec.export_path is not None
    if spec.export_path is not None and spec.import_path is None:
        raise invalid(
            "lustre.export_path",
            spec.export_path,
            "the legacy export path belongs to an import path",
            "set import_path as well",
            source=API_SOURCE,
        )
    if spec.auto_import_policy is not None and spec.import_path is None:
        raise invalid(
            "lustre.auto_import_policy",
            spec.auto_import_policy,
            "the legacy auto import policy belongs to an import path; a DRA has auto_import_events",
            "remove auto_import_policy",
            source=API_SOURCE,
        )
    if legacy and dra:
        raise invalid(
            "lustre.import_path",
            spec.import_path,
            "ImportPath is not supported on a file system with a data repository association; "
            "a file system has one kind of S3 link, never both",
            "remove import_path/export_path and link S3 through the DRA (s3_path)",
            source=API_SOURCE,
        )
    if legacy and spec.deployment_type == "PERSISTENT_2":
        raise invalid(
            "lustre.import_path",
            spec.import_path,
            "ImportPath, ExportPath and AutoImportPolicy are not supported on PERSISTENT_2",
            "remove import_path/export_path and set s3_path (a data repository association)",
            source=API_SOURCE,
        )
    if dra and not data_repository_association_supported(spec):
        raise invalid(
            "lustre.s3_path",
            spec.s3_path,
            f"data repository associations work on Lustre 2.12 and 2.15 file systems except "
            f"SCRATCH_1; this one is {spec.deployment_type} on Lustre {spec.lustre_version}",
            "use SCRATCH_2 or PERSISTENT_2 on Lustre 2.15, or the legacy import_path on SCRATCH_1",
            source=DRA_SOURCE,
        )
    if dra and not spec.file_system_path.startswith("/"):
        raise invalid(
            "lustre.file_system_path",
            spec.file_system_path,
            "the DRA's file system path is an absolute path such as / or /datasets",
            "start it with /",
            source=DRA_SOURCE,
        )
    for field in ("auto_import_events", "auto_export_events"):
        events = getattr(spec, field)
        if len(set(events)) != len(events):
            raise invalid(f"lustre.{field}", events, "each event is listed once", "remove the repeats")


def _check_efa(spec: LustreSpec) -> None:
    if not spec.efa_enabled:
        return
    if spec.deployment_type != "PERSISTENT_2" or spec.metadata_mode is None:
        raise invalid(
            "lustre.efa_enabled",
            spec.efa_enabled,
            "EFA-enabled FSx requires PERSISTENT_2 with a metadata configuration "
            f"(found {spec.deployment_type}, metadata_mode {spec.metadata_mode})",
            "use deployment_type: PERSISTENT_2 and metadata_mode: AUTOMATIC (or USER_PROVISIONED)",
            source=API_SOURCE,
        )
    assert spec.throughput_per_tib is not None  # PERSISTENT_2 throughput is checked before
    step = EFA_CAPACITY_STEP_GIB[spec.throughput_per_tib]
    if spec.storage_capacity_gib <= 0 or spec.storage_capacity_gib % step:
        raise invalid(
            "lustre.storage_capacity_gib",
            spec.storage_capacity_gib,
            f"an EFA-enabled file system at {spec.throughput_per_tib} MB/s/TiB takes multiples of {step} GiB",
            f"use {step} GiB or a multiple of it",
            source=EFA_SOURCE,
        )
