"""MTBF from Slurm's real drain history (or the published figure), the write time, and the advice."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from stack_files import slurm_stack, write_stack

from gpuforge.checkpoint import (
    CheckpointSpec,
    Mtbf,
    check,
    checkpoint_advice,
    interval,
    mtbf,
    stack_advice,
    write_time,
)
from gpuforge.checkpoint.advice import NoWriteTime
from gpuforge.components.specs import LustreSpec
from gpuforge.errors import InputError
from gpuforge.stack_config import StackConfig, load_stack_config
from gpuforge.usage.events import parse_events
from gpuforge.usage.window import Window

# Real `sacctmgr --parsable2 show event` of Slurm 26.05.5 (tests/fixtures/accounting/README.md says how).
EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "accounting" / "events.txt"
WINDOW = Window(
    since=datetime(2026, 12, 4, 15, 54, tzinfo=UTC), until=datetime(2026, 12, 4, 15, 56, tzinfo=UTC)
)
P5_LUSTRE = LustreSpec(deployment_type="PERSISTENT_2", storage_capacity_gib=24000, throughput_per_tib=250)


def test_mtbf_from_the_real_drain_history() -> None:
    """Three gpuforge events (gpu1 DOWN 0 s; gpu2 DRAIN 3 s; gpu2 DRAIN open, 33 s to the window's end) on two
    nodes over 120 s: up time 2 x 120 - 36 = 204 node-seconds over 3 failures = 68 s per node."""
    events = parse_events(EVENTS.read_text(), source=str(EVENTS))
    own = mtbf.from_history(events, WINDOW, nodes=2, min_events=1)
    assert own is not None
    assert own.failures == 3
    assert own.node_seconds == pytest.approx(204 / 3)
    assert own.job_seconds(2) == pytest.approx(34)
    assert "3 gpuforge failures over 0.1 node-hours" in own.source


def test_a_drain_without_a_gpuforge_reason_is_not_a_failure() -> None:
    """A drain someone made by hand (here the real file with one reason replaced) is not counted."""
    text = EVENTS.read_text().replace("gpuforge: ecc: 2 uncorrectable errors", "maintenance window")
    own = mtbf.from_history(parse_events(text, source="edited"), WINDOW, nodes=2, min_events=1)
    assert own is not None and own.failures == 2


def test_too_few_failures_fall_back_on_the_published_figure() -> None:
    """The fixture's 3 failures are under MIN_EVENTS: the Llama 3 figure is used, per node
    2048 nodes x 54 days x 24 h / 419 interruptions = 6334.6 h."""
    events = parse_events(EVENTS.read_text(), source=str(EVENTS))
    assert mtbf.from_history(events, WINDOW, nodes=2) is None
    used = mtbf.cluster_or_published(events, WINDOW, nodes=2)
    assert used.node_seconds / 3600 == pytest.approx(2048 * 54 * 24 / 419)
    assert "419 unexpected interruptions in 54 days" in used.source
    assert "arxiv.org/abs/2407.21783" in used.source
    assert mtbf.cluster_or_published(None, None, nodes=2) == used


def test_write_time_from_lustre_throughput_gib_over_decimal_mb() -> None:
    """24000 GiB x 250 MB/s/TiB is 6000 MB/s (AWS's TiB = GiB / 1000); 1000 GiB = 1000 x 2^30 bytes."""
    estimate = write_time.estimate(1000, P5_LUSTRE)
    assert estimate is not None
    assert estimate.seconds == pytest.approx(1000 * 2**30 / 6000e6)
    assert "6000 MB/s" in estimate.source


def test_measured_write_seconds_replace_the_estimate() -> None:
    advice = checkpoint_advice(
        CheckpointSpec(size_gib=1000, write_seconds=95), P5_LUSTRE, 16, mtbf.published()
    )
    assert advice.write_seconds == 95
    assert advice.write_source == "measured (writeSeconds)"


def test_no_lustre_and_no_write_seconds_is_refused() -> None:
    with pytest.raises(
        NoWriteTime, match=r"gpuforge:checkpoint.sizeGiB = 1000.*Fix: set gpuforge:checkpoint.writeSeconds"
    ):
        checkpoint_advice(CheckpointSpec(size_gib=1000), None, 16, mtbf.published())


def test_advice_figures_and_json() -> None:
    node = Mtbf(node_seconds=1_600_000.0, source="test figure")
    advice = checkpoint_advice(CheckpointSpec(size_gib=1000, write_seconds=200), P5_LUSTRE, 16, node)
    assert advice.mtbf_job_seconds == 100_000
    assert advice.young_seconds == pytest.approx((2 * 200 * 100_000) ** 0.5)
    # Daly at delta/2M = 0.001: sqrt(2 delta M)(1 + sqrt(0.001)/3 + 0.001/9) - delta
    assert advice.daly_seconds == pytest.approx(6324.555 * (1 + 0.0316228 / 3 + 0.001 / 9) - 200, rel=1e-6)
    lost = 200 / advice.daly_seconds + (advice.daly_seconds / 2 + 200) / 100_000
    assert advice.lost_fraction == pytest.approx(lost)
    assert advice.warning is None
    document = advice.to_json()
    assert set(document) == {
        "size_gib", "write_seconds", "write_source", "nodes", "mtbf_node_hours", "mtbf_job_hours",
        "mtbf_source", "young_seconds", "daly_seconds", "lost_fraction", "warning",
    }  # fmt: skip
    assert document["daly_seconds"] == round(advice.daly_seconds)


def test_a_write_of_half_the_mtbf_is_refused_at_plan_time() -> None:
    node = Mtbf(node_seconds=10_000.0, source="test figure")
    with pytest.raises(
        InputError, match=r"gpuforge:checkpoint: writing 1000 GiB takes 5000 s.*would exceed the MTBF.*Fix: "
    ):
        check(CheckpointSpec(size_gib=1000, write_seconds=5000), None, 1, node)
    assert check(CheckpointSpec(size_gib=1000, write_seconds=4999), None, 1, node).warning is not None


def test_a_large_lost_fraction_is_a_warning_with_the_fix() -> None:
    node = Mtbf(node_seconds=100_000.0, source="test figure")
    small = check(CheckpointSpec(size_gib=10, write_seconds=100), None, 1, node)
    assert small.lost_fraction < 0.10 and small.warning is None
    large = check(CheckpointSpec(size_gib=10, write_seconds=1000), None, 1, node)
    assert large.lost_fraction > 0.10
    assert large.warning is not None and "Fix: make the checkpoint smaller" in large.warning
    assert large.lines()[-1].startswith("WARNING: gpuforge:checkpoint:")
    assert large.line() == "; ".join(large.lines())


def _stack_config(tmp_path: Path, checkpoint: dict[str, float]) -> StackConfig:
    lustre = {"deploymentType": "PERSISTENT_2", "storageCapacityGiB": 24000, "throughputPerTiB": 250}
    config = slurm_stack(**{"gpuforge:lustre": lustre, "gpuforge:checkpoint": checkpoint})
    return load_stack_config(write_stack(tmp_path, "test", config), "test")


def test_stack_advice_for_usage_follows_the_cluster_s_history(tmp_path: Path) -> None:
    """What `gpuforge usage` calls: with the window's events, the cluster's own MTBF once it has enough
    failures (here the real file's 3, allowed with min_events=3), else the published figure."""
    config = _stack_config(tmp_path, {"sizeGiB": 1, "writeSeconds": 1})
    events = parse_events(EVENTS.read_text(), source=str(EVENTS))
    own = stack_advice(config, events, WINDOW, min_events=3)
    assert own is not None and own.mtbf_source.startswith("drain history: 3 gpuforge failures")
    assert own.mtbf_job_seconds == pytest.approx(204 / 3 / 2)  # the stack's 2 nodes
    assert own.daly_seconds == pytest.approx(interval.daly_interval(1, 34))
    fallback = stack_advice(config, events, WINDOW)
    assert fallback is not None and fallback.mtbf_source.startswith("published: 419")
    assert stack_advice(config.model_copy(update={"checkpoint": None})) is None


def test_a_size_too_large_for_any_write_time_is_refused() -> None:
    with pytest.raises(InputError, match=r"gpuforge:checkpoint.sizeGiB = 1e\+308: too large"):
        checkpoint_advice(CheckpointSpec(size_gib=1e308), P5_LUSTRE, 16, mtbf.published())
