"""The series slurmctld serves, counted on the real daemon: the figures gpuforge/data/monitoring_sizing.yaml
keeps for the sizing estimate (slurm_series_per_node, slurm_series_fixed).

Real parts: slurmctld and two dynamic slurmd of the Slurm test root (26.05.5, the series the matrices pin) in
the namespace cluster of tests/scheduler/slurm_cluster.py, with the slurm.conf gpuforge renders
(`MetricsType=metrics/openmetrics`). The endpoints are read from inside the controller's network namespace
(the host's curl under `nsenter --net`), as Prometheus on the controller reads them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.monitoring.sizing import load_sizing
from gpuforge.scheduler.render import node_registration

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/scheduler"))  # the Slurm cluster helpers: a test folder, not a package
from slurm_cluster import DEFAULT_ROOT, SlurmTestCluster, open_cluster, unavailable_reason  # noqa: E402
from test_slurm_daemons import _name, start_small_cluster  # noqa: E402

sys.path.remove(str(REPO / "tests/scheduler"))

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

NODES = 2
# A series line of the OpenMetrics text: its name, then its labels or a space.
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, list[str]], list[str]]]:
    """({path: the series lines slurmctld serves there}, the nodes' names), with NODES nodes registered."""
    with open_cluster(tmp_path_factory.mktemp("slurm-metrics"), ROOT, REPO / "gpuforge") as test_cluster:
        spec = start_small_cluster(test_cluster, "gfmetrics", max_nodes=NODES)
        names = [_name(test_cluster, number) for number in range(1, NODES + 1)]
        for index, name in enumerate(names, start=11):
            test_cluster.start_node(name, index, node_registration(spec))
        for name in names:
            test_cluster.wait_node(name, "registered", lambda node: "IDLE" in node.get("State", ""))
        base = f"http://{spec.site.controller_addr}:{spec.site.slurmctld_port}"
        yield (
            {path: _series(test_cluster, base + path) for path in ("/metrics/nodes", "/metrics/jobs")},
            names,
        )


def _series(test_cluster: SlurmTestCluster, url: str) -> list[str]:
    """The series lines (not the # HELP / # TYPE ones) slurmctld answers at `url`."""
    namespace = f"/var/run/netns/{test_cluster.tag}-ctl"
    done = subprocess.run(
        ["nsenter", f"--net={namespace}", "curl", "-sS", "--fail", "--max-time", "30", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{url}: {done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith("#")]
    assert all(_SERIES.match(line) for line in lines), done.stdout[-2000:]
    return lines


def test_nodes_serves_the_per_node_series_the_sizing_counts(
    served: tuple[dict[str, list[str]], list[str]],
) -> None:
    pages, names = served
    for name in names:
        mine = [line for line in pages["/metrics/nodes"] if f'node="{name}"' in line]
        assert len(mine) == load_sizing().slurm_series_per_node, "\n".join(mine)
    assert any(line.startswith(f'slurm_node_gpus{{node="{names[0]}"}}') for line in pages["/metrics/nodes"])


def test_the_cluster_wide_series_are_the_fixed_count_the_sizing_keeps(
    served: tuple[dict[str, list[str]], list[str]],
) -> None:
    pages, _ = served
    cluster_wide = [line for line in pages["/metrics/nodes"] if "node=" not in line]
    assert len(cluster_wide) + len(pages["/metrics/jobs"]) == load_sizing().slurm_series_fixed
