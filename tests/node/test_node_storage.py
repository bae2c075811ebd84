"""/scratch on a RAID0 of every instance-store disk, /fsx on Lustre."""

from __future__ import annotations

from pathlib import Path

from node_scenarios import context, fixture, g5_xlarge_healthy, p5_healthy

from gpuforge.node.report import Status
from gpuforge.node.storage import check_fsx, check_scratch, parse_mdstat, parse_mounts


def test_parsers() -> None:
    mounts = parse_mounts(fixture("storage/mounts-p5.txt") + "/dev/sdb /mnt/with\\040space ext4 rw 0 0\n")
    assert [(m.device, m.fstype) for m in mounts if m.mountpoint == "/scratch"] == [("/dev/md0", "xfs")]
    assert mounts[-1].mountpoint == "/mnt/with space"
    arrays = parse_mdstat(fixture("storage/mdstat-p5.txt"))
    assert arrays["md0"].level == "raid0" and arrays["md0"].state == "active"
    assert arrays["md0"].members == tuple(f"nvme{i}n1" for i in range(1, 9))
    degraded = parse_mdstat("md1 : active raid1 nvme2n1[1](F) nvme1n1[0]\n")
    assert degraded["md1"].members == ("nvme1n1",)


def test_p5_scratch_and_fsx(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root, require_fsx=True)
    assert check_scratch(ctx).evidence == (
        "/scratch (xfs) on /dev/md0 = md0 raid0 of nvme1n1, nvme2n1, nvme3n1, nvme4n1, nvme5n1, nvme6n1, nvme7n1, nvme8n1"
    )
    assert check_fsx(ctx).evidence == "/fsx is Lustre from 10.0.12.34@tcp:/abcdefgh"


def test_array_missing_a_disk_fails(root: Path) -> None:
    scenario = p5_healthy().with_files({"proc/mdstat": fixture("storage/mdstat-p5-7-disks.txt")})
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_scratch(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("md0 has 7 of 8 instance-store disk(s);")


def test_ebs_volume_in_the_array_fails(root: Path) -> None:
    scenario = p5_healthy().instance_store(["nvme8n1"], model="Amazon Elastic Block Store")
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_scratch(ctx)
    assert result.status is Status.FAIL
    assert "not instance store: nvme8n1 (Amazon Elastic Block Store)" in result.evidence


def test_scratch_not_mounted_fails(root: Path) -> None:
    ctx, _ = context(
        p5_healthy().with_files({"proc/mounts": fixture("storage/mounts-no-scratch.txt")}),
        "p5.48xlarge",
        root,
    )
    result = check_scratch(ctx)
    assert (result.status, result.evidence) == (
        Status.FAIL,
        "nothing is mounted at /scratch (8 instance-store disk(s) expected)",
    )


def test_named_md_device_is_resolved(root: Path) -> None:
    mounts = fixture("storage/mounts-p5.txt").replace("/dev/md0 /scratch", "/dev/md/scratch /scratch")
    ctx, _ = context(p5_healthy().with_files({"proc/mounts": mounts}), "p5.48xlarge", root)
    (root / "dev/md").mkdir(parents=True)
    (root / "dev/md0").touch()
    (root / "dev/md/scratch").symlink_to("../md0")
    assert check_scratch(ctx).status is Status.PASS


def test_single_disk_type_mounts_the_disk_directly(root: Path) -> None:
    ctx, _ = context(g5_xlarge_healthy(), "g5.xlarge", root)
    result = check_scratch(ctx)
    assert (result.status, result.evidence) == (
        Status.PASS,
        "/scratch (xfs) on the single instance-store disk /dev/nvme1n1",
    )


def test_fsx_only_fails_when_required(root: Path) -> None:
    scenario = p5_healthy().with_files({"proc/mounts": fixture("storage/mounts-no-scratch.txt")})
    ctx, _ = context(scenario, "p5.48xlarge", root / "a")
    assert check_fsx(ctx).status is Status.PASS
    ctx, _ = context(scenario, "p5.48xlarge", root / "b", require_fsx=True)
    result = check_fsx(ctx)
    assert (result.status, result.evidence) == (Status.FAIL, "nothing is mounted at /fsx")
    assert "Lustre client" in result.cause
