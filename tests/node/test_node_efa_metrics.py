"""The EFA counter collector (gpuforge.node.efa_metrics) on a fake sysfs tree.

No EFA device exists on the test hosts, so /sys/class/infiniband is a tree built in
tmp_path: a hand-made fake, the only way to stand in for a kernel interface. Its shape
(<device>/ports/<port>/hw_counters/<counter>, one decimal value and a newline per file, and
the RDMA core's `lifespan` beside the counters) and the counter names are the kernel's
(KERNEL_PORT_COUNTERS cites the efa driver's EFA_DEFINE_PORT_STATS); the p5 device names are
tests/fixtures/node/efa-devices-p5.txt and the GPU layout tests/fixtures/node/topo/p5-h100.txt
(both described in tests/fixtures/node/README.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from monitoring_tools import free_port, prometheus, running, tool
from node_scenarios import Scenario, fixture, install_commands
from waiting import WAIT_S, wait_until

from gpuforge.node.efa_metrics import (
    KERNEL_PORT_COUNTERS,
    collect,
    efa_devices,
    layout_from_topology,
    load_layout,
)
from gpuforge.node.runner import CommandResult
from gpuforge.node.topology import TOPOLOGY, parse_topology

REPO = Path(__file__).resolve().parents[2]
GPUFORGE = Path(sys.executable).with_name("gpuforge")
P5_DEVICES = fixture("efa-devices-p5.txt").split()
P4D_DEVICES = fixture("efa-devices-p4d.txt").split()
SAMPLE = re.compile(
    r'^(?P<name>[a-z_]+)\{device="(?P<device>[^"]*)",port="(?P<port>[^"]*)",'
    r'gpus="(?P<gpus>[^"]*)",hpc_job="(?P<job>[^"]*)"\} (?P<value>\d+)$'
)


def fake_sysfs(root: Path, devices: Sequence[str], counters: Sequence[str] = KERNEL_PORT_COUNTERS) -> Path:
    """/sys/class/infiniband below `root`: each device's port 1 with `counters` (value: device# * 1000 + counter#)."""
    infiniband = root / "sys/class/infiniband"
    for number, device in enumerate(devices):
        folder = infiniband / device / "ports" / "1" / "hw_counters"
        folder.mkdir(parents=True)
        (folder / "lifespan").write_text("10\n")
        for index, counter in enumerate(counters):
            (folder / counter).write_text(f"{number * 1000 + index}\n")
    return infiniband


class Topo:
    """A runner that answers `nvidia-smi topo -m` with a fixture and counts its calls."""

    def __init__(self, name: str | None) -> None:
        self.text = fixture(f"topo/{name}") if name else None
        self.calls = 0

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls += 1
        if self.text is None:
            return CommandResult(tuple(argv), None, missing=True)
        return CommandResult(tuple(argv), 0, self.text)


def samples(text: str) -> list[dict[str, str]]:
    return [match.groupdict() for line in text.splitlines() if (match := SAMPLE.match(line))]


def test_p5_layout_is_four_devices_per_gpu() -> None:
    layout = layout_from_topology(parse_topology(fixture("topo/p5-h100.txt")))
    assert sorted(layout, key=P5_DEVICES.index) == P5_DEVICES
    for gpu in range(8):
        assert [d for d, gpus in layout.items() if gpus == (str(gpu),)] == P5_DEVICES[4 * gpu : 4 * gpu + 4]


def test_p4d_layout_is_one_device_per_gpu_pair() -> None:
    layout = layout_from_topology(parse_topology(fixture("topo/p4d-a100.txt")))
    assert [layout[device] for device in P4D_DEVICES] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]


def test_every_counter_of_every_device_with_gpus_and_job(tmp_path: Path) -> None:
    infiniband = fake_sysfs(tmp_path, P5_DEVICES)
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "1").write_text("4242\n")  # job 4242 holds GPU 1
    text = collect(infiniband, mapping, tmp_path / "layout.json", Topo("p5-h100.txt"), lambda _: None)
    rows = samples(text)
    assert len(rows) == 32 * len(KERNEL_PORT_COUNTERS)
    assert {row["name"] for row in rows} == {f"gpuforge_efa_{c}_total" for c in KERNEL_PORT_COUNTERS}
    by_key = {(row["name"], row["device"]): row for row in rows}
    tx = by_key["gpuforge_efa_tx_bytes_total", P5_DEVICES[4]]  # GPU 1's first device (the 5th of 32)
    assert (tx["port"], tx["gpus"], tx["job"], tx["value"]) == ("1", "1", "4242", "4000")
    idle = by_key["gpuforge_efa_retrans_pkts_total", P5_DEVICES[0]]  # GPU 0: no job
    retrans_index = KERNEL_PORT_COUNTERS.index("retrans_pkts")
    assert (idle["gpus"], idle["job"], idle["value"]) == ("0", "", str(retrans_index))
    assert "lifespan" not in text
    # one HELP and one TYPE line per family, and each family's samples together
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names)) == len(KERNEL_PORT_COUNTERS)


def test_the_alert_rules_read_names_the_collector_writes() -> None:
    """gpuforge/data/monitoring_alerts.yaml's gpuforge_efa_* names are counters of the kernel's list."""
    rules = yaml.safe_load((REPO / "gpuforge/data/monitoring_alerts.yaml").read_text())
    used = {name for rule in rules["alerts"] for name in re.findall(r"gpuforge_efa_[a-z_]+", rule["expr"])}
    assert used, "no EFA alert found: the test would check nothing"
    assert used <= {f"gpuforge_efa_{counter}_total" for counter in KERNEL_PORT_COUNTERS}


def test_a_shared_device_names_both_jobs(tmp_path: Path) -> None:
    """p4d: one device serves GPUs 0 and 1; with two jobs on them the label names both."""
    infiniband = fake_sysfs(tmp_path, P4D_DEVICES, ("tx_bytes",))
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("31\n")
    (mapping / "1").write_text("30\n")
    (mapping / "2").write_text("30\n")
    text = collect(infiniband, mapping, tmp_path / "layout.json", Topo("p4d-a100.txt"), lambda _: None)
    jobs = {row["device"]: (row["gpus"], row["job"]) for row in samples(text)}
    assert jobs == {
        P4D_DEVICES[0]: ("0,1", "30,31"),
        P4D_DEVICES[1]: ("2,3", "30"),
        P4D_DEVICES[2]: ("4,5", ""),
        P4D_DEVICES[3]: ("6,7", ""),
    }


def test_older_driver_counters_and_garbled_files(tmp_path: Path) -> None:
    """A driver without the network counters writes fewer series; a garbled file is skipped, not fatal."""
    infiniband = fake_sysfs(tmp_path, P5_DEVICES[:1], KERNEL_PORT_COUNTERS[:13])
    hw = infiniband / P5_DEVICES[0] / "ports/1/hw_counters"
    (hw / "rx_bytes").write_text("N/A\n")
    (hw / "Bad-Name").write_text("1\n")
    logged: list[str] = []
    text = collect(infiniband, tmp_path / "map", tmp_path / "layout.json", Topo("p5-h100.txt"), logged.append)
    names = {row["name"] for row in samples(text)}
    assert names == {f"gpuforge_efa_{c}_total" for c in KERNEL_PORT_COUNTERS[:13] if c != "rx_bytes"}
    assert any("rx_bytes holds 'N/A', not a counter value" in line for line in logged)
    assert any("'Bad-Name' is not a usable metric name" in line for line in logged)


def test_no_efa_gives_an_empty_file_and_no_nvidia_smi(tmp_path: Path) -> None:
    topo = Topo("p5-h100.txt")
    assert (
        collect(tmp_path / "absent", tmp_path / "map", tmp_path / "layout.json", topo, lambda _: None) == ""
    )
    assert topo.calls == 0


def test_layout_is_cached_and_rebuilt_when_devices_change(tmp_path: Path) -> None:
    cache = tmp_path / "layout.json"
    topo = Topo("p5-h100.txt")
    devices = tuple(P5_DEVICES)
    first = load_layout(cache, devices, topo, lambda _: None)
    assert load_layout(cache, devices, topo, lambda _: None) == first
    assert topo.calls == 1
    load_layout(cache, devices[:-1], topo, lambda _: None)  # a device went away: read the topology again
    assert topo.calls == 2
    cache.write_text("{not json")
    assert load_layout(cache, devices, topo, lambda _: None) == first
    assert topo.calls == 3


def test_without_nvidia_smi_devices_are_unlabelled_and_retried(tmp_path: Path) -> None:
    infiniband = fake_sysfs(tmp_path, P5_DEVICES[:2], ("tx_bytes",))
    topo = Topo(None)
    logged: list[str] = []
    text = collect(infiniband, tmp_path / "map", tmp_path / "layout.json", topo, logged.append)
    assert [(row["gpus"], row["job"]) for row in samples(text)] == [("", ""), ("", "")]
    assert any("no GPU layout" in line for line in logged)
    collect(infiniband, tmp_path / "map", tmp_path / "layout.json", topo, logged.append)
    assert topo.calls == 2  # a failure is not cached


def test_promtool_accepts_the_file(tmp_path: Path) -> None:
    """The real promtool of the pinned release (the monitoring test root, tests/monitoring_tools.py)
    lints the written file clean."""
    promtool = tool("promtool")
    infiniband = fake_sysfs(tmp_path, P5_DEVICES)
    text = collect(
        infiniband, tmp_path / "map", tmp_path / "layout.json", Topo("p5-h100.txt"), lambda _: None
    )
    checked = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")


def test_console_script_writes_atomically_and_exits_2_when_it_cannot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fake_sysfs(root, P5_DEVICES[:1], ("tx_bytes",))
    cache = tmp_path / "layout.json"
    cache.write_text('{"devices": ["rdmap79s0"], "layout": {"rdmap79s0": ["0"]}}\n')
    out = tmp_path / "textfile" / "gpuforge-efa.prom"

    def run(target: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(GPUFORGE), "node", "efa-metrics", "--out", str(target),
                "--layout-cache", str(cache), "--mapping-dir", str(tmp_path / "map"),
                "--infiniband", str(root / "sys/class/infiniband"),
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    done = run(out)
    assert done.returncode == 0, done.stderr
    assert out.read_text().splitlines()[-1] == (
        'gpuforge_efa_tx_bytes_total{device="rdmap79s0",port="1",gpus="0",hpc_job=""} 0'
    )
    assert sorted(p.name for p in out.parent.iterdir()) == ["gpuforge-efa.prom"]
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    failed = run(blocker / "x.prom")
    assert failed.returncode == 2 and "cannot write the file" in failed.stderr
    assert "Traceback" not in failed.stderr


# --- Hostile names: the device (a sysfs folder name) and the GPUs (`nvidia-smi topo -m`, the cache) ---

# A folder name may hold anything but `/` and NUL: this one closes the label, ends the line and
# writes a series of its own if it is not escaped.
HOSTILE_DEVICE = 'evil"} 1\nfake_series{device="x"} 1\n# '
# P4D's GPU1 column renamed in the real matrix (header and row): a name that adds a label if written raw.
HOSTILE_GPU = 'GPU1",injected="yes'


class HostileTopo(Topo):
    """The captured p4d matrix (tests/fixtures/node/topo/p4d-a100.txt) with GPU1's column and row renamed."""

    def __init__(self) -> None:
        super().__init__("p4d-a100.txt")
        assert self.text is not None and self.text.count("GPU1\t") == 2  # the header cell and the row
        self.text = self.text.replace("GPU1\t", f"{HOSTILE_GPU}\t")


def hostile_textfile(tmp_path: Path) -> str:
    """The collector's file for p4d's first device and a hostile device, with a hostile layout cache under /run
    (GPU names that end the label and the line) and HostileTopo's matrix for when the cache is not trusted."""
    infiniband = fake_sysfs(tmp_path, [P4D_DEVICES[0], HOSTILE_DEVICE], ("tx_bytes",))
    devices = efa_devices(infiniband)
    cache = tmp_path / "layout.json"
    layout = {device: ['0"} 1\nfake_series{gpu="0"} 1\n# ', "1"] for device in devices}
    cache.write_text(json.dumps({"devices": list(devices), "layout": layout}), encoding="utf-8")
    return collect(infiniband, tmp_path / "map", cache, HostileTopo(), lambda _: None)


# What the file must say, and nothing more: the hostile device's name as its label's value, and the
# renamed GPU left out (it is no GPU index, so it can be neither labelled nor joined to a job).
EXPECTED_SERIES = [
    {"__name__": "gpuforge_efa_tx_bytes_total", "device": P4D_DEVICES[0], "port": "1", "gpus": "0"},
    {"__name__": "gpuforge_efa_tx_bytes_total", "device": HOSTILE_DEVICE, "port": "1"},
]


def test_a_gpu_column_that_is_no_index_is_left_out_and_logged(tmp_path: Path) -> None:
    logged: list[str] = []
    layout = load_layout(tmp_path / "layout.json", tuple(P4D_DEVICES), HostileTopo(), logged.append)
    assert layout[P4D_DEVICES[0]] == ("0",)
    assert any(HOSTILE_GPU in line and "not GPU<index>" in line for line in logged)


@pytest.mark.parametrize(
    "gpus",
    [['0"} 1\nfake_series 1'], ["../../etc"], ["/etc/passwd"], ["0,1"], [0]],
    ids=["injection", "relative-path", "absolute-path", "comma", "not-text"],
)
def test_a_cache_naming_gpus_otherwise_than_by_index_is_not_trusted(
    tmp_path: Path, gpus: list[object]
) -> None:
    """The cache under /run is read back only as load_layout wrote it: other GPU names mean nvidia-smi
    is asked again, never that a name reaches a label or a path below the mapping folder."""
    infiniband = fake_sysfs(tmp_path, P4D_DEVICES[:1], ("tx_bytes",))
    cache = tmp_path / "layout.json"
    cache.write_text(json.dumps({"devices": P4D_DEVICES[:1], "layout": {P4D_DEVICES[0]: gpus}}))
    topo = Topo("p4d-a100.txt")
    text = collect(infiniband, tmp_path / "map", cache, topo, lambda _: None)
    assert topo.calls == 1
    assert [(row["device"], row["gpus"]) for row in samples(text)] == [(P4D_DEVICES[0], "0,1")]
    assert "fake_series" not in text


def test_promtool_accepts_the_file_with_hostile_names(tmp_path: Path) -> None:
    checked = subprocess.run(
        [str(tool("promtool")), "check", "metrics"],
        input=hostile_textfile(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        return json.load(answer)


def test_hostile_names_reach_prometheus_as_exactly_the_intended_series(tmp_path: Path) -> None:
    """The whole path of the file on a node: the real node_exporter's textfile collector reads it, the
    real Prometheus scrapes node_exporter, and its API gives the series it stored with their label
    values as JSON strings: exactly the collector's series, the hostile name as its label's value,
    no forged label or series, and no textfile error."""
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    (textfiles / "gpuforge-efa.prom").write_text(hostile_textfile(tmp_path), encoding="utf-8")
    exporter_port = free_port()
    exporter = [
        str(tool("prometheus-node-exporter")),
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfiles}",
        "--web.disable-exporter-metrics",
        f"--web.listen-address=127.0.0.1:{exporter_port}",
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
                ],
            }
        )
    )
    with (
        running(exporter, tmp_path / "node-exporter.log"),
        prometheus(config, tmp_path / "data", tmp_path / "prometheus.log") as port,
    ):
        base = f"http://127.0.0.1:{port}/api/v1"
        errors = wait_until(
            "Prometheus to have scraped node_exporter's textfile collector",
            lambda: _get(f"{base}/query?query=node_textfile_scrape_error")["data"]["result"],
            context=lambda: (tmp_path / "node-exporter.log").read_text(errors="replace")[-3000:],
        )
        assert [item["value"][1] for item in errors] == ["0"]
        selector = urllib.parse.quote('{job="node",__name__!~"node_.*|up|scrape_.*"}')
        stored = _get(f"{base}/series?match[]={selector}")["data"]
    found = [
        {name: value for name, value in series.items() if name not in ("instance", "job")}
        for series in stored
    ]
    assert sorted(found, key=repr) == sorted(EXPECTED_SERIES, key=repr)


def test_the_collectors_log_shows_a_hostile_device_name_escaped(tmp_path: Path) -> None:
    """`gpuforge node efa-metrics` as the timer runs it, with nvidia-smi (the captured p4d matrix) on PATH: the
    hostile device is named in the journal, escaped, so its line feed cannot start a forged line."""
    root = tmp_path / "root"
    infiniband = fake_sysfs(root, [P4D_DEVICES[0], HOSTILE_DEVICE], ("tx_bytes",))
    bin_dir = install_commands(Scenario().set(TOPOLOGY, fixture("topo/p4d-a100.txt")), tmp_path / "bin")
    done = subprocess.run(
        [
            str(GPUFORGE), "node", "efa-metrics", "--out", str(tmp_path / "textfile" / "gpuforge-efa.prom"),
            "--layout-cache", str(tmp_path / "layout.json"), "--mapping-dir", str(tmp_path / "map"),
            "--infiniband", str(infiniband),
        ],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "names no GPU for" in done.stderr and repr(HOSTILE_DEVICE)[1:-1] in done.stderr
    assert all(line.startswith("gpuforge: ") and line.isprintable() for line in done.stderr.splitlines())
