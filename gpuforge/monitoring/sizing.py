"""How many series a cluster sends the controller's Prometheus, and whether the controller holds them.

Counts come from what gpuforge renders: the dcgm-exporter field list of the GPU type
(gpuforge.monitoring.fields), the EFA collector's counters (gpuforge.node.efa_metrics) on every EFA
device the type has, node_exporter's series (measured: a fixed part and a part per CPU), slurmctld's
own metrics where it serves them, and the series Prometheus adds per target. Memory is
`fixed_bytes + series * bytes_per_series`, both measured by benchmarks/prometheus_bench.py on the
real Prometheus (gpuforge/data/monitoring_sizing.yaml, with the run). The verdict says whether the
controller type holds that in the share of its memory Prometheus may take, and, when not even the
largest listed type does, that remote write to Amazon Managed Service for Prometheus should carry it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from gpuforge.hardware import InstanceType
from gpuforge.monitoring.fields import load_fields
from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS

DATA_FILE = "data/monitoring_sizing.yaml"
SIZING_FILE = "sizing.json"
TARGETS_PER_NODE = 2  # prometheus.yml's two jobs on every GPU node: dcgm-exporter and node_exporter
FITS = "fits"
TOO_SMALL = "controller too small"
REMOTE_WRITE = "remote write"
UNKNOWN = "controller memory unknown"
_MIB = 2**20
_GIB = 2**30
_SECONDS_PER_DAY = 86400
# "on average, Prometheus uses only around 1-2 bytes per sample", and
# needed_disk_space = retention_time_seconds * ingested_samples_per_second * bytes_per_sample.
# The upper figure, to be safe. Source: https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects
BYTES_PER_SAMPLE_ON_DISK = 2
DISK_SOURCE = "https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects"


@dataclass(frozen=True)
class SizingData:
    source: str
    bytes_per_series: float
    fixed_bytes: int
    node_exporter_series: int  # on the benchmark machine, without the per-CPU series
    node_exporter_series_per_cpu: float
    scrape_series_per_target: int
    slurm_series_per_node: int
    slurm_series_fixed: int
    memory_fraction: float
    default_controller: str
    controller_memory_mib: dict[str, int]


@cache
def load_sizing() -> SizingData:
    """The shipped sizing data (a broken shipped file is a bug: ValueError)."""
    data = yaml.safe_load(resources.files("gpuforge").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    measured = data["measured"]
    sizing = SizingData(
        source=str(measured["source"]),
        bytes_per_series=float(measured["bytes_per_series"]),
        fixed_bytes=int(measured["fixed_bytes"]),
        node_exporter_series=int(measured["node_exporter_series"]),
        node_exporter_series_per_cpu=float(measured["node_exporter_series_per_cpu"]),
        scrape_series_per_target=int(data["scrape_series_per_target"]),
        slurm_series_per_node=int(data["slurm_series_per_node"]),
        slurm_series_fixed=int(data["slurm_series_fixed"]),
        memory_fraction=float(data["memory_fraction"]),
        default_controller=str(data["default_controller"]),
        controller_memory_mib={str(name): int(mib) for name, mib in data["controller_memory_mib"].items()},
    )
    if sizing.bytes_per_series <= 0 or not 0 < sizing.memory_fraction <= 1:
        raise ValueError(f"{DATA_FILE}: bytes_per_series must be positive and memory_fraction in (0, 1]")
    if sizing.default_controller not in sizing.controller_memory_mib:
        raise ValueError(f"{DATA_FILE}: default_controller {sizing.default_controller} has no memory row")
    return sizing


def node_series(instance: InstanceType, *, slurm_metrics: bool, data: SizingData) -> dict[str, int]:
    """Active series one GPU node of `instance` adds, by source."""
    parts = {
        "dcgm": instance.gpu_count * len(load_fields().for_type(instance)),
        "efa": len(instance.efa_cards) * len(KERNEL_PORT_COUNTERS),
        "node_exporter": round(
            data.node_exporter_series + data.node_exporter_series_per_cpu * instance.vcpus
        ),
        "scrape": TARGETS_PER_NODE * data.scrape_series_per_target,
    }
    if slurm_metrics:
        parts["slurm"] = data.slurm_series_per_node
    return parts


def memory_bytes(series: int, data: SizingData) -> int:
    return round(data.fixed_bytes + series * data.bytes_per_series)


def _budget(controller: str, data: SizingData) -> int | None:
    mib = data.controller_memory_mib.get(controller)
    return None if mib is None else int(mib * _MIB * data.memory_fraction)


def max_nodes(
    instance: InstanceType, controller: str, *, slurm_metrics: bool = True, data: SizingData | None = None
) -> int:
    """The most nodes of `instance` whose series fit in `controller`'s share for Prometheus (0: none)."""
    data = data or load_sizing()
    budget = _budget(controller, data)
    if budget is None:
        raise ValueError(f"{DATA_FILE}: no memory row for {controller}")
    per_node = sum(node_series(instance, slurm_metrics=slurm_metrics, data=data).values())
    fixed = data.slurm_series_fixed if slurm_metrics else 0
    room = budget - memory_bytes(fixed, data)
    return max(0, int(room // (per_node * data.bytes_per_series)))


@dataclass(frozen=True)
class Estimate:
    nodes: int
    per_node: dict[str, int]
    series: int
    memory_bytes: int
    controller: str
    controller_memory_mib: int | None
    budget_bytes: int | None
    verdict: str
    advice: str

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "series_per_node": self.per_node,
            "series": self.series,
            "prometheus_memory_mib": round(self.memory_bytes / _MIB),
            "controller": self.controller,
            "controller_memory_mib": self.controller_memory_mib,
            "prometheus_share_mib": None if self.budget_bytes is None else round(self.budget_bytes / _MIB),
            "verdict": self.verdict,
            "advice": self.advice,
        }


def estimate(
    instance: InstanceType,
    *,
    nodes: int,
    controller: str,
    slurm_metrics: bool,
    remote_write: bool,
    data: SizingData | None = None,
) -> Estimate:
    """The series of `nodes` GPU nodes and whether `controller` holds them (see the module docstring)."""
    data = data or load_sizing()
    per_node = node_series(instance, slurm_metrics=slurm_metrics, data=data)
    series = nodes * sum(per_node.values()) + (data.slurm_series_fixed if slurm_metrics else 0)
    needed = memory_bytes(series, data)
    budget = _budget(controller, data)
    share = f"{data.memory_fraction:.0%} of its memory"
    if budget is None:
        verdict = UNKNOWN
        advice = (
            f"gpuforge does not know {controller}'s memory: add it to controller_memory_mib in gpuforge/{DATA_FILE} "
            f"(AWS DescribeInstanceTypes MemoryInfo.SizeInMiB) to check it against {needed / _MIB:.0f} MiB."
        )
    elif needed <= budget:
        verdict = FITS
        advice = f"{controller} holds it: Prometheus needs {needed / _MIB:.0f} MiB of {budget / _MIB:.0f} MiB ({share})."
    else:
        fitting = sorted(
            (mib, name)
            for name, mib in data.controller_memory_mib.items()
            if needed <= mib * _MIB * data.memory_fraction
        )
        if fitting:
            verdict = TOO_SMALL
            advice = (
                f"{controller} is too small: Prometheus needs {needed / _MIB:.0f} MiB, more than {budget / _MIB:.0f} "
                f"MiB ({share}). Fix: set gpuforge:scheduler.controllerInstanceType to {fitting[0][1]} "
                f"({fitting[0][0]} MiB) or larger."
            )
        else:
            verdict = REMOTE_WRITE
            advice = (
                f"no listed controller type holds {needed / _MIB:.0f} MiB in {share}: the cluster outgrows one "
                "Prometheus, and remote write to Amazon Managed Service for Prometheus should carry the load"
                + (
                    " (remoteWrite is set). "
                    if remote_write
                    else ". Fix: set gpuforge:monitoring.remoteWrite to a workspace. "
                )
                + "The controller's Prometheus still holds the recent series in memory (its head block), so "
                "choose its largest type as well."
            )
    return Estimate(
        nodes=nodes,
        per_node=per_node,
        series=series,
        memory_bytes=needed,
        controller=controller,
        controller_memory_mib=data.controller_memory_mib.get(controller),
        budget_bytes=budget,
        verdict=verdict,
        advice=advice,
    )


def sizing_json(estimate: Estimate, *, cluster: str) -> str:
    """sizing.json: the estimate, with the measurement it rests on."""
    from gpuforge.monitoring.dashboards import json_text

    document = {**estimate.to_json(), "measured": load_sizing().source}
    return json_text(SIZING_FILE, document, cluster=cluster, source=f"gpuforge/{DATA_FILE}")


def summary(text: str) -> list[str]:
    """The lines `monitoring render` prints for a sizing.json."""
    sizing = json.loads(text)
    per_node = ", ".join(f"{name} {count}" for name, count in sizing["series_per_node"].items())
    return [
        f"sizing: {sizing['nodes']} nodes x ({per_node}) = {sizing['series']} active series; "
        f"Prometheus needs about {sizing['prometheus_memory_mib']} MiB",
        f"sizing: {sizing['verdict']}: {sizing['advice']}",
    ]


def disk_bytes(series: int, *, retention_days: int, scrape_interval_s: int) -> int:
    """Bytes Prometheus keeps on disk for `series` scraped every `scrape_interval_s` for `retention_days`
    (the storage documentation's formula, BYTES_PER_SAMPLE_ON_DISK a sample)."""
    samples_per_day = series * _SECONDS_PER_DAY // scrape_interval_s
    return retention_days * samples_per_day * BYTES_PER_SAMPLE_ON_DISK


def retention_problem(
    series: int, *, retention_days: int, scrape_interval_s: int, disk_gib: int, where: str
) -> str | None:
    """Why `retention_days` of `series` do not fit in `disk_gib` GiB (`where` names the disk); None: they fit."""
    needed = disk_bytes(series, retention_days=retention_days, scrape_interval_s=scrape_interval_s)
    room = disk_gib * _GIB
    if needed <= room:
        return None
    per_day = disk_bytes(series, retention_days=1, scrape_interval_s=scrape_interval_s)
    most = max_retention_days(series, scrape_interval_s=scrape_interval_s, disk_gib=disk_gib)
    return (
        f"{retention_days} days of {series} series scraped every {scrape_interval_s}s at "
        f"{BYTES_PER_SAMPLE_ON_DISK} bytes a sample ({DISK_SOURCE}) need {needed / _GIB:.1f} GiB "
        f"({per_day / _GIB:.2f} GiB a day), more than the {disk_gib} GiB {where} holds; "
        f"at most {most} days fit"
    )


def max_retention_days(series: int, *, scrape_interval_s: int, disk_gib: int) -> int:
    """The most whole days of `series` that `disk_gib` GiB hold (disk_bytes); 0: not even one."""
    return disk_gib * _GIB // disk_bytes(series, retention_days=1, scrape_interval_s=scrape_interval_s)
