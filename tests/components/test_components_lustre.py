"""FSx for Lustre: the rules CreateFileSystem / CreateDataRepositoryAssociation enforce, and the resources."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from components_helpers import (
    DRA,
    EGRESS,
    FSX,
    INGRESS,
    SECURITY_GROUP,
    cluster_spec,
    one,
    rules_of,
    run,
    user_data,
)

from gpuforge.components import GpuCluster, LustreSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

S3 = "s3://datasets-bucket/train/"


def persistent(**overrides: Any) -> LustreSpec:
    values: dict[str, Any] = {
        "deployment_type": "PERSISTENT_2",
        "storage_capacity_gib": 2400,
        "throughput_per_tib": 250,
    }
    values.update(overrides)
    return LustreSpec(**values)


@pytest.mark.parametrize("capacity", [1200, 2400, 4800, 7200, 100800])
@pytest.mark.parametrize("deployment", ["PERSISTENT_2", "SCRATCH_2"])
def test_valid_ssd_sizes(deployment: str, capacity: int) -> None:
    throughput = 125 if deployment == "PERSISTENT_2" else None
    LustreSpec(deployment_type=deployment, storage_capacity_gib=capacity, throughput_per_tib=throughput)


@pytest.mark.parametrize("capacity", [0, 600, 1000, 1800, 3600, 6000])
@pytest.mark.parametrize("deployment", ["PERSISTENT_2", "SCRATCH_2"])
def test_invalid_ssd_sizes(deployment: str, capacity: int) -> None:
    throughput = 125 if deployment == "PERSISTENT_2" else None
    with pytest.raises(
        InputError, match=rf"lustre\.storage_capacity_gib = {capacity}: .*multiple of 2400 GiB"
    ):
        LustreSpec(deployment_type=deployment, storage_capacity_gib=capacity, throughput_per_tib=throughput)


def test_scratch_1_sizes_step_by_3600() -> None:
    LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=3600, lustre_version="2.10")
    with pytest.raises(InputError, match=r"round up to the next valid size \(7200 GiB\)"):
        LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=4800, lustre_version="2.10")


@pytest.mark.parametrize("throughput", [125, 250, 500, 1000])
def test_persistent_2_throughput_tiers(throughput: int) -> None:
    persistent(throughput_per_tib=throughput)


@pytest.mark.parametrize("throughput", [None, 50, 100, 200, 2000])
def test_persistent_2_throughput_refused(throughput: int | None) -> None:
    with pytest.raises(InputError, match=r"lustre\.throughput_per_tib = .*125, 250, 500, 1000"):
        persistent(throughput_per_tib=throughput)


def test_throughput_refused_on_scratch() -> None:
    with pytest.raises(
        InputError, match=r"lustre\.throughput_per_tib = 125: per-unit storage throughput is only"
    ):
        LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, throughput_per_tib=125)


def test_persistent_2_with_import_path_is_refused() -> None:
    with pytest.raises(InputError, match=r"lustre\.import_path = .*not supported on PERSISTENT_2"):
        persistent(import_path=S3)


def test_dra_on_scratch_1_is_refused() -> None:
    with pytest.raises(InputError, match=r"lustre\.s3_path = .*except SCRATCH_1"):
        LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=1200, s3_path=S3)


def test_import_path_and_dra_together_are_refused() -> None:
    with pytest.raises(InputError, match=r"lustre\.import_path = .*never both"):
        LustreSpec(
            deployment_type="SCRATCH_1",
            storage_capacity_gib=1200,
            lustre_version="2.10",
            s3_path=S3,
            import_path=S3,
        )


def test_legacy_link_on_every_type_but_persistent_2_and_never_beside_a_dra() -> None:
    """AWS documents ImportPath/ExportPath for SCRATCH_1, SCRATCH_2 and PERSISTENT_1 on any Lustre
    version; it refuses them only beside a DRA and on PERSISTENT_2 (CreateFileSystemLustreConfiguration,
    ImportPath: 'not supported for file systems with a data repository association'). The old rule
    also refused SCRATCH_2 on Lustre 2.15, which AWS accepts."""
    LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=1200, import_path=S3, export_path=S3)
    LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, lustre_version="2.10", import_path=S3)
    LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, import_path=S3)
    with pytest.raises(
        InputError, match=r"not supported on a file system with a data repository association"
    ):
        LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, import_path=S3, s3_path=S3)
    with pytest.raises(InputError, match=r"not supported on PERSISTENT_2"):
        LustreSpec(
            deployment_type="PERSISTENT_2", storage_capacity_gib=1200, throughput_per_tib=250, import_path=S3
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lustre_version": "2.10"}, r"PERSISTENT_2 does not run Lustre 2\.10"),
        (
            {"metadata_mode": "AUTOMATIC", "lustre_version": "2.12"},
            r"a metadata configuration needs Lustre 2\.15",
        ),
        ({"metadata_mode": "USER_PROVISIONED", "metadata_iops": 7000}, r"lustre\.metadata_iops = 7000"),
        ({"metadata_iops": 3000}, r"only given in USER_PROVISIONED mode"),
        ({"kms_key_arn": "not-an-arn"}, r"lustre\.kms_key_arn = 'not-an-arn'"),
        ({"s3_path": "datasets-bucket/train"}, r"lustre\.s3_path = .*not an S3 URL"),
        ({"auto_import_events": ("NEW", "NEW")}, r"each event is listed once"),
        ({"s3_path": S3, "file_system_path": "data"}, r"lustre\.file_system_path = 'data'"),
        ({"deployment_type": "PERSISTENT_1"}, r"LustreSpec\.deployment_type = 'PERSISTENT_1'"),
    ],
)
def test_other_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        persistent(**overrides)


def test_kms_key_only_on_persistent_types() -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    persistent(kms_key_arn=key)
    with pytest.raises(InputError, match=r"a customer KMS key is only for PERSISTENT types"):
        LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, kms_key_arn=key)


def test_metadata_only_on_persistent_2() -> None:
    with pytest.raises(InputError, match=r"a metadata configuration is only for PERSISTENT_2"):
        LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, metadata_mode="AUTOMATIC")


@pytest.mark.parametrize(("throughput", "step"), [(125, 38400), (250, 19200), (500, 9600), (1000, 4800)])
def test_efa_enabled_capacity_steps(throughput: int, step: int) -> None:
    for capacity in (step, 2 * step):
        persistent(
            efa_enabled=True,
            metadata_mode="AUTOMATIC",
            throughput_per_tib=throughput,
            storage_capacity_gib=capacity,
        )
    with pytest.raises(InputError, match=rf"takes multiples of {step} GiB"):
        persistent(
            efa_enabled=True,
            metadata_mode="AUTOMATIC",
            throughput_per_tib=throughput,
            storage_capacity_gib=2400,
        )


def test_efa_enabled_needs_persistent_2_with_metadata() -> None:
    with pytest.raises(
        InputError, match=r"EFA-enabled FSx requires PERSISTENT_2 with a metadata configuration"
    ):
        persistent(efa_enabled=True, throughput_per_tib=1000, storage_capacity_gib=4800)
    with pytest.raises(InputError, match=r"EFA-enabled FSx requires PERSISTENT_2"):
        LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=4800, efa_enabled=True)


# -- resources under the mocks -----------------------------------------------------------


def deploy(spec: Any) -> dict[str, Any]:
    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("demo", spec)
        return pulumi.Output.all(
            cluster.subnet_id,
            cluster.security_group_id,
            cluster.file_system_dns_name,
            cluster.file_system_mount_name,
            cluster.bucket,
            cluster.summary,
        )

    keys = ("subnet", "nodes_sg", "dns_name", "mount_name", "bucket", "summary")
    return dict(zip(keys, run(build), strict=True))


def lustre_group(mocks: GpuforgeMocks) -> str:
    (group,) = [g for g in mocks.of_type(SECURITY_GROUP) if g.name == "demo-lustre-sg"]
    return group.id


def port_rules(rules: list[dict[str, Any]]) -> set[tuple[str, int | None, int | None, str]]:
    return {
        (
            rule["ipProtocol"],
            int(rule["fromPort"]) if "fromPort" in rule else None,
            int(rule["toPort"]) if "toPort" in rule else None,
            rule["referencedSecurityGroupId"],
        )
        for rule in rules
    }


def test_persistent_2_linked_to_the_cluster_bucket(mocks: GpuforgeMocks) -> None:
    out = deploy(cluster_spec(lustre=persistent()))
    fs = one(mocks, FSX)
    group = lustre_group(mocks)
    assert fs.inputs["subnetIds"] == out["subnet"], "the file system sits in the nodes' subnet"
    assert fs.inputs["securityGroupIds"] == [group]
    assert (fs.inputs["deploymentType"], fs.inputs["fileSystemTypeVersion"]) == ("PERSISTENT_2", "2.15")
    assert (fs.inputs["storageType"], fs.inputs["dataCompressionType"]) == ("SSD", "LZ4")
    assert fs.inputs["perUnitStorageThroughput"] == 250
    assert not {"importPath", "exportPath", "autoImportPolicy"} & set(fs.inputs)
    assert (out["dns_name"], out["mount_name"]) == (fs.outputs["dnsName"], fs.outputs["mountName"])
    # DRA with auto import and export of new, changed and deleted objects.
    dra = one(mocks, DRA).inputs
    assert dra["fileSystemId"] == fs.id
    assert dra["dataRepositoryPath"] == f"s3://{out['bucket']}/"
    assert dra["s3"] == {
        "autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
        "autoExportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
    }
    # LNet from the nodes and from the file servers themselves.
    expected = {
        (protocol, low, high, peer)
        for protocol, low, high in (("tcp", 988, 988), ("tcp", 1018, 1023))
        for peer in (group, out["nodes_sg"])
    }
    assert port_rules(rules_of(mocks, INGRESS, group)) == expected
    assert port_rules(rules_of(mocks, EGRESS, group)) == expected
    # The clients accept LNet from the file system.
    client_rules = {r for r in port_rules(rules_of(mocks, INGRESS, out["nodes_sg"])) if r[3] == group}
    assert client_rules == {("tcp", 988, 988, group), ("tcp", 1021, 1023, group)}
    # FSx checks the rules when it creates the file system, so it waits for all of them.
    rules = [r for r in mocks.resources if r.type in (INGRESS, EGRESS) and r.name.startswith("demo-lustre-")]
    assert len(rules) == 10
    assert {r.urn for r in rules} <= set(fs.dependencies)
    # The nodes mount it and the health check requires it.
    script = user_data(mocks)
    assert f"readonly FSX_DNS_NAME={fs.outputs['dnsName']}\n" in script
    assert f"readonly FSX_MOUNT_NAME={fs.outputs['mountName']}\n" in script
    assert "readonly FSX_MOUNT=/fsx\n" in script
    assert "readonly NODE_CHECK_ARGS='--report-asg --require-fsx'\n" in script
    lustre = out["summary"]["lustre"]
    # 2400 GiB at 250 MB/s/TiB: AWS counts 2400 GiB as 2.4 TiB, so 600 MB/s.
    assert lustre == {
        "deployment_type": "PERSISTENT_2",
        "storage_capacity_gib": 2400,
        "throughput_per_tib": 250,
        "throughput_mbps": 600,
        "lustre_version": "2.15",
        "efa_enabled": False,
        "s3_link": "dra",
    }


def test_scratch_2_with_its_own_s3_path(mocks: GpuforgeMocks) -> None:
    out = deploy(
        cluster_spec(lustre=LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200, s3_path=S3))
    )
    fs = one(mocks, FSX).inputs
    assert "perUnitStorageThroughput" not in fs
    assert "kmsKeyId" not in fs
    assert one(mocks, DRA).inputs["dataRepositoryPath"] == S3
    assert out["summary"]["lustre"]["throughput_mbps"] == 240  # SCRATCH_2 baseline: 200 MB/s per TiB


def test_scratch_1_uses_the_legacy_link(mocks: GpuforgeMocks) -> None:
    spec = LustreSpec(
        deployment_type="SCRATCH_1",
        storage_capacity_gib=1200,
        import_path=S3,
        export_path=S3 + "export/",
        auto_import_policy="NEW_CHANGED_DELETED",
    )
    out = deploy(cluster_spec(lustre=spec))
    fs = one(mocks, FSX)
    assert (fs.inputs["importPath"], fs.inputs["exportPath"]) == (S3, S3 + "export/")
    assert fs.inputs["autoImportPolicy"] == "NEW_CHANGED_DELETED"
    assert mocks.of_type(DRA) == []
    assert out["mount_name"] == "fsx"
    assert out["summary"]["lustre"]["s3_link"] == "import_path"


def test_efa_enabled_file_system(mocks: GpuforgeMocks) -> None:
    spec = persistent(
        efa_enabled=True,
        throughput_per_tib=1000,
        storage_capacity_gib=4800,
        metadata_mode="USER_PROVISIONED",
        metadata_iops=12000,
    )
    out = deploy(cluster_spec(lustre=spec))
    fs = one(mocks, FSX).inputs
    assert fs["efaEnabled"] is True
    assert fs["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": 12000}
    group = lustre_group(mocks)
    everything = {("-1", None, None, group), ("-1", None, None, out["nodes_sg"])}
    assert port_rules(rules_of(mocks, INGRESS, group)) == everything
    assert port_rules(rules_of(mocks, EGRESS, group)) == everything
    assert ("-1", None, None, group) in port_rules(rules_of(mocks, INGRESS, out["nodes_sg"]))
    assert out["summary"]["lustre"]["throughput_mbps"] == 4800


def test_no_lustre_no_mount(mocks: GpuforgeMocks) -> None:
    out = deploy(cluster_spec())
    assert mocks.of_type(FSX) == []
    assert (out["dns_name"], out["mount_name"], out["summary"]["lustre"]) == (None, None, None)
    script = user_data(mocks)
    assert "mount_fsx" not in script
    assert "readonly NODE_CHECK_ARGS=--report-asg\n" in script
