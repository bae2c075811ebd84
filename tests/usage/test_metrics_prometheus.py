"""Useful and idle GPU-hours from the real Prometheus (the monitoring test root's), over backfilled
series of the metrics layer's per-job recording rules for two jobs.

The history is what the rules (gpuforge/data/monitoring_alerts.yaml, `recording`, every minute) record:
per job and minute, held = 60 x its GPUs and useful = 60 x the sum of its GPUs' SM_ACTIVE.
Job 101 holds 8 GPUs for 60 minutes at SM_ACTIVE 0.5, but minutes 20-29 and its last minute at
0.01 (idle); job 102 holds 4 GPUs for 30 minutes at 0.9. Backfilled series carry no staleness markers
(a rule's series gets one when it stops), so the idle query's look-back past job 101's last, idle
minute must not count that minute again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from usage_support import prometheus_with_history

from gpuforge.errors import InputError
from gpuforge.monitoring.rules import load_rules
from gpuforge.usage.metrics import HELD, RULE_INTERVAL_S, USEFUL, job_metrics
from gpuforge.usage.window import Window


def _history(start: int) -> str:
    lines = [f"# TYPE {HELD} gauge", f"# TYPE {USEFUL} gauge"]
    held_lines, useful_lines = [], []
    for job, gpus, minutes, busy, idle_minutes in (
        ("101", 8, 60, 0.5, [*range(20, 30), 59]),
        ("102", 4, 30, 0.9, range(0)),
    ):
        for minute in range(minutes):
            at = start + 60 * minute
            active = 0.01 if minute in idle_minutes else busy
            held_lines.append(f'{HELD}{{hpc_job="{job}"}} {60 * gpus} {at}')
            useful_lines.append(f'{USEFUL}{{hpc_job="{job}"}} {60 * gpus * active:g} {at}')
    # OpenMetrics wants each metric family's samples together, under its TYPE line.
    return "\n".join([lines[0], *held_lines, lines[1], *useful_lines, "# EOF", ""])


def test_the_queried_series_are_the_metrics_layers_recording_rules() -> None:
    rules = load_rules()
    assert {HELD, USEFUL} <= {rule.record for rule in rules.recording}
    assert rules.recording_interval == f"{RULE_INTERVAL_S // 60}m"


@pytest.mark.slow
def test_useful_and_idle_from_the_real_prometheus(tmp_path: Path) -> None:
    start = (int(time.time()) // 3600 - 6) * 3600  # inside retention, older than the head block
    with prometheus_with_history(_history(start), tmp_path) as url:
        window = Window(datetime.fromtimestamp(start - 600, UTC), datetime.fromtimestamp(start + 7200, UTC))
        found = job_metrics(url, window)
        # A window that ends before job 102 began and after job 101's idle stretch: clipped sums.
        early = job_metrics(url, Window(window.since, datetime.fromtimestamp(start + 60 * 40 - 1, UTC)))
    assert set(found) == {"101", "102"}
    assert found["101"].held_s == pytest.approx(60 * 480)
    assert found["101"].useful_s == pytest.approx(49 * 240 + 11 * 4.8)
    assert found["101"].idle_s == pytest.approx(11 * 480)
    assert found["102"].held_s == pytest.approx(30 * 240)
    assert found["102"].useful_s == pytest.approx(30 * 216)
    assert found["102"].idle_s == 0
    assert early["101"].held_s == pytest.approx(40 * 480)  # minutes 0-39 only
    assert early["101"].idle_s == pytest.approx(10 * 480)


def test_a_prometheus_that_is_not_there_is_exit_2_naming_the_flag(tmp_path: Path) -> None:
    window = Window(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    with pytest.raises(
        InputError, match=r"--prometheus 'http://127\.0\.0\.1:9': no answer from Prometheus.*Fix:"
    ):
        job_metrics("http://127.0.0.1:9", window)


@pytest.mark.slow
def test_a_minute_before_the_window_is_not_counted_idle_in_it(tmp_path: Path) -> None:
    """Rule evaluations need not fall on whole minutes: job 7 (8 GPUs) has an idle sample at :50 and a busy
    one at 1:50. The window (0:55, 1:55] holds only the busy one, so nothing in it was idle; the idle
    subquery's first step (1:00) must not reach back to the :50 sample, which the held sum leaves out."""
    start = (int(time.time()) // 3600 - 6) * 3600  # inside retention, older than the head block
    history = "\n".join(
        [
            f"# TYPE {HELD} gauge",
            f'{HELD}{{hpc_job="7"}} 480 {start + 50}',
            f'{HELD}{{hpc_job="7"}} 480 {start + 110}',
            f"# TYPE {USEFUL} gauge",
            f'{USEFUL}{{hpc_job="7"}} 4.8 {start + 50}',
            f'{USEFUL}{{hpc_job="7"}} 240 {start + 110}',
            "# EOF",
            "",
        ]
    )
    with prometheus_with_history(history, tmp_path) as url:
        found = job_metrics(
            url, Window(datetime.fromtimestamp(start + 55, UTC), datetime.fromtimestamp(start + 115, UTC))
        )
    assert found["7"].held_s == pytest.approx(480)
    assert found["7"].useful_s == pytest.approx(240)
    assert found["7"].idle_s == 0
