"""EFA device count (with its bounded retry) and the GPUDirect RDMA path."""

from __future__ import annotations

from pathlib import Path

from node_scenarios import context, fixture, g5_xlarge_healthy, p4d_healthy, p5_healthy

from gpuforge.node.efa import FI_INFO_EFA, check_devices, check_gpudirect, parse_fi_info_devices
from gpuforge.node.report import Status
from gpuforge.node.versions import LSMOD

P5_DEVICES = fixture("efa-devices-p5.txt").split()


def test_fi_info_counts_devices_not_endpoints() -> None:
    text = fixture("fi_info/efa-p5-32.txt")
    assert text.count("provider: efa") == 96  # efa-direct RDM, efa RDM and efa DGRAM per device
    devices = parse_fi_info_devices(text)
    assert len(devices) == 32 and devices[:2] == ("rdmap79s0", "rdmap80s0")
    assert parse_fi_info_devices(fixture("fi_info/efa-p4d-4-rdm.txt")) == (
        "rdmap16s27",
        "rdmap32s27",
        "rdmap144s27",
        "rdmap160s27",
    )
    assert parse_fi_info_devices(fixture("fi_info/no-device.txt")) == ()


def test_captured_fi_info_of_both_libfabric_generations() -> None:
    # libfabric 2.x (captured): one device listed three times, efa-direct RDM, efa RDM, efa DGRAM
    text = fixture("fi_info/efa-1-device-libfabric2.txt")
    assert text.count("provider: efa") == 3 and "fabric: efa-direct" in text
    assert parse_fi_info_devices(text) == ("rdmap47s0",)
    # libfabric 1.x on a p4d (captured): the fabric is named per device, "EFA-fe80::..."
    text = fixture("fi_info/efa-p4d-4-rdm.txt")
    assert text.count("fabric: EFA-fe80::") == 4
    assert len(parse_fi_info_devices(text)) == 4


def test_all_32_on_p5_and_4_on_p4d(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "p5")
    result = check_devices(ctx)
    assert result.status is Status.PASS and result.evidence.startswith("32 of 32 EFA device(s)")
    ctx, _ = context(p4d_healthy(), "p4d.24xlarge", root / "p4d")
    assert check_devices(ctx).status is Status.PASS


def test_31_of_32_fails_after_bounded_retries(root: Path) -> None:
    scenario = p5_healthy().set(FI_INFO_EFA, fixture("fi_info/efa-p5-31.txt"))
    scenario.dirs.remove("sys/class/infiniband/rdmap131s0/device")
    del scenario.files["sys/class/infiniband/rdmap131s0/device/p2p"]
    sleeps: list[float] = []
    ctx, replay = context(scenario, "p5.48xlarge", root, attempts=4, sleep=sleeps.append)
    result = check_devices(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("31 of 32 EFA device(s)")
    assert "fi_info lists 31 device(s) (after 4 attempt(s))" in result.evidence
    assert sleeps == [0.5, 0.5, 0.5]
    assert replay.calls.count(FI_INFO_EFA) == 4


def test_late_efa_device_is_found_on_retry(root: Path) -> None:
    """The device appears while the check sleeps, as on types that bring EFA up late."""
    scenario = p5_healthy()
    scenario.dirs.remove("sys/class/infiniband/rdmap131s0/device")
    del scenario.files["sys/class/infiniband/rdmap131s0/device/p2p"]
    late = root / "sys/class/infiniband/rdmap131s0/device"
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        late.mkdir(parents=True)

    ctx, _ = context(scenario, "p5.48xlarge", root, attempts=5, sleep=sleep)
    result = check_devices(ctx)
    assert result.status is Status.PASS
    assert sleeps == [0.5]


def test_dev_type_without_efa_passes(root: Path) -> None:
    ctx, replay = context(g5_xlarge_healthy(), "g5.xlarge", root)
    for check in (check_devices, check_gpudirect):
        result = check(ctx)
        assert (result.status, result.evidence) == (Status.PASS, "no EFA on this type (g5.xlarge)")
    assert FI_INFO_EFA not in replay.calls


def test_fi_info_missing_means_no_efa_software_and_no_retry(root: Path) -> None:
    sleeps: list[float] = []
    ctx, _ = context(p5_healthy().drop("fi_info"), "p5.48xlarge", root, attempts=5, sleep=sleeps.append)
    result = check_devices(ctx)
    assert result.status is Status.FAIL
    assert sleeps == [] and "(after 1 attempt(s))" in result.evidence
    assert "`fi_info` is not installed or not on PATH" in result.evidence
    assert "EFA installer" in result.cause


def test_gpudirect_providers(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "a")
    result = check_gpudirect(ctx)
    assert result.status is Status.PASS
    assert result.evidence == "efa driver peer-to-peer provider NVIDIA on all 32 EFA device(s)"
    ctx, _ = context(
        p4d_healthy().efa_devices(fixture("efa-devices-p4d.txt").split(), p2p="NVIDIA peermem"),
        "p4d.24xlarge",
        root / "b",
    )
    assert (
        check_gpudirect(ctx).evidence
        == "efa driver peer-to-peer provider NVIDIA peermem on all 4 EFA device(s)"
    )


def test_no_p2p_provider_fails_with_proprietary_and_warns_with_open_modules(root: Path) -> None:
    scenario = p4d_healthy()
    for name in fixture("efa-devices-p4d.txt").split():
        scenario.files[f"sys/class/infiniband/{name}/device/p2p"] = "\n"
    ctx, _ = context(scenario, "p4d.24xlarge", root / "a")
    result = check_gpudirect(ctx)
    assert result.status is Status.FAIL
    assert "rdmap16s27=''" in result.evidence and "proprietary kernel modules 535.183.06" in result.evidence

    scenario = p5_healthy().set(LSMOD, fixture("lsmod/p5-h100.txt"))
    for name in P5_DEVICES:
        scenario.files[f"sys/class/infiniband/{name}/device/p2p"] = "\n"
    ctx, _ = context(scenario, "p5.48xlarge", root / "b")
    result = check_gpudirect(ctx)
    assert result.status is Status.WARN
    assert "DMA-BUF" in result.cause
