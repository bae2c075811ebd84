"""The monitoring daemons in the image: 77-monitoring.sh against stand-ins (a wrong checksum stops the
step before anything is unpacked; a right one unpacks, links and adds the users), the units against
systemd's own verdict and the code's paths, the flags they start the daemons with against the real
binaries, and the dcgm-exporter field list the payload carries."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from image_helpers import MATRICES, REPO, base_path, load_matrix_data, write_matrix
from monitoring_tools import tool
from systemd_units import DCGM_EXPORTER_UNIT, read_unit, systemd_root, verify

from gpuforge import hardware
from gpuforge.images.matrix import MONITORING_KEYS, load_valid
from gpuforge.images.payload import MONITORING_DIR
from gpuforge.images.render import STEPS, RenderOptions, render
from gpuforge.images.tags import ami_tags
from gpuforge.monitoring.fields import FIELDS_FILE, field_list_csv
from gpuforge.monitoring.prometheus import ALERTMANAGER, NODE_EXPORTER_PORT
from gpuforge.node.efa_metrics import DEFAULT_OUT
from gpuforge.stack_config import load_stack_config

SCRIPTS = REPO / "images" / "scripts"
FILES = REPO / "images" / "files"
STEP = SCRIPTS / "77-monitoring.sh"
UNITS = ("gpuforge-node-exporter.service", "gpuforge-prometheus.service", "gpuforge-alertmanager.service")
FIELDS_DROPIN = FILES / "nvidia-dcgm-exporter-gpuforge-fields.conf"
BINARIES = {
    "node_exporter": ["node_exporter"],
    "prometheus": ["prometheus", "promtool"],
    "alertmanager": ["alertmanager", "amtool"],
}
USERS = {"node_exporter": "node-exporter", "prometheus": "prometheus", "alertmanager": "alertmanager"}


def _lib_value(name: str) -> str:
    found = re.search(rf'^{name}="([^"]+)"$', (SCRIPTS / "lib.sh").read_text(), re.M)
    assert found, name
    return found.group(1)


# --- the install step -------------------------------------------------------------------------


def _release(tmp: Path, name: str, version: str) -> tuple[str, str]:
    """A stand-in of Prometheus's release build: <name>-<version>.linux-amd64/<binaries>; (file name, sha256)."""
    file_name = f"{name}-{version}.linux-amd64.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for binary in BINARIES[name]:
            body = f"#!/bin/sh\necho '{binary}, version {version} (branch: HEAD, revision: test)'\n".encode()
            info = tarfile.TarInfo(f"{name}-{version}.linux-amd64/{binary}")
            info.size, info.mode = len(body), 0o755
            archive.addfile(info, io.BytesIO(body))
    (tmp / file_name).write_bytes(buffer.getvalue())
    return file_name, hashlib.sha256(buffer.getvalue()).hexdigest()


def _payload_with_releases(tmp: Path, data: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """A render whose monitoring pins are this test's own tarballs (so their sha256 is known)."""
    data = data or load_matrix_data()
    releases = tmp / "releases"
    releases.mkdir()
    for name in MONITORING_KEYS:
        if name in data:
            file_name, sha256 = _release(releases, name, data[name]["version"])
            data[name] |= {
                "sha256": sha256,
                "sha256_source": "hashed: sha256sum of this test's own stand-in tarball",
            }
            assert data[name]["url"].endswith("/" + file_name)
    matrix, digest = load_valid(write_matrix(tmp, data))
    return render(
        matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp / "out"
    ).payload, releases


def _run_step(
    payload: Path, tmp: Path, releases: Path
) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    bin_dir, log, root = tmp / "bin", tmp / "calls.log", tmp / "root"
    bin_dir.mkdir()
    root.mkdir()
    stubs = {
        # curl -fsSL --retry 3 -o DEST URL: serve the release by its file name, as GitHub would
        "curl": f'while [[ $# -gt 1 ]]; do if [[ $1 == -o ]]; then out=$2; fi; shift; done; cp "{releases}/${{1##*/}}" "$out"',
        "useradd": "exit 0",
        "getent": "exit 2",
    }
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{log}"\n{body}\n')
        stub.chmod(0o755)
    done = subprocess.run(
        ["bash", str(payload / "scripts" / STEP.name)],
        env={"PATH": f"{bin_dir}:{base_path(tmp / 'base-bin')}", "GPUFORGE_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else [], root


def test_the_step_runs_after_dcgm_and_before_the_units_are_installed() -> None:
    assert STEPS.index("75-dcgm.sh") < STEPS.index(STEP.name) < STEPS.index("85-gpuforge.sh")


def test_a_wrong_checksum_stops_the_step_before_anything_is_unpacked(tmp_path: Path) -> None:
    payload, releases = _payload_with_releases(tmp_path)
    # the release served is not the one the matrix pins: its bytes differ from what was hashed
    (releases / "prometheus-3.13.4.linux-amd64.tar.gz").write_bytes(b"a tarball someone swapped")
    done, calls, root = _run_step(payload, tmp_path, releases)
    assert done.returncode == 1
    matrix, _ = load_valid(tmp_path / "matrix.yaml")
    assert matrix.prometheus is not None
    assert f"{matrix.prometheus.url}: sha256 is " in done.stderr
    assert f"the matrix pins {matrix.prometheus.sha256}; refusing to run it" in done.stderr
    assert [call.split()[0] for call in calls] == ["curl", "curl"]  # node_exporter's, then prometheus's
    assert not (root / "opt").exists() and not (root / "usr/local/bin").exists()


def test_the_pinned_releases_are_unpacked_linked_and_given_their_users(tmp_path: Path) -> None:
    payload, releases = _payload_with_releases(tmp_path)
    done, calls, root = _run_step(payload, tmp_path, releases)
    assert done.returncode == 0, done.stderr
    matrix, _ = load_valid(tmp_path / "matrix.yaml")
    for name, pin in matrix.monitoring_tarballs:
        prefix = f"/opt/gpuforge/{name}-{pin.version}"
        for binary in BINARIES[name]:
            assert (root / prefix.lstrip("/") / binary).is_file()
            assert (root / "usr/local/bin" / binary).readlink() == Path(prefix) / binary
        assert any(call.startswith("useradd --system") and call.endswith(f" {USERS[name]}") for call in calls)
    installed = root / _lib_value("DCGM_FIELDS_FILE").lstrip("/")
    assert installed.read_text() == (payload / MONITORING_DIR / FIELDS_FILE).read_text()
    assert (root / _lib_value("MONITORING_CONFIG_DIR").lstrip("/")).is_dir()


def test_a_matrix_without_the_daemons_downloads_nothing(tmp_path: Path) -> None:
    data = load_matrix_data()
    for name in MONITORING_KEYS:
        del data[name]
    payload, releases = _payload_with_releases(tmp_path, data)
    done, calls, root = _run_step(payload, tmp_path, releases)
    assert (done.returncode, calls) == (0, [])
    assert "the matrix pins no prometheus; the image has none" in done.stderr
    assert (root / _lib_value("DCGM_FIELDS_FILE").lstrip("/")).is_file()  # dcgm-exporter's list all the same


# --- the payload and the tags -----------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(MATRICES.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_payload_carries_the_field_list_of_the_targets(tmp_path: Path, path: Path) -> None:
    matrix, digest = load_valid(path)
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    carried = (payload / MONITORING_DIR / FIELDS_FILE).read_text()
    assert carried.startswith(f"# {FIELDS_FILE} of image matrix {matrix.name} ")
    for target in matrix.targets:  # one list serves every target (rule monitoring.one-field-list)
        rows = field_list_csv(hardware.get(target), cluster="x").split("\n", 1)[1]
        assert carried.split("\n", 1)[1] == rows


def test_the_ami_records_each_daemons_version() -> None:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    tags = ami_tags(matrix, digest)
    assert (tags["gpuforge:node-exporter"], tags["gpuforge:prometheus"], tags["gpuforge:alertmanager"]) == (
        "1.11.1",
        "3.13.4",
        "0.33.1",
    )


# --- the units --------------------------------------------------------------------------------


def test_node_exporter_reads_the_efa_collectors_folder_on_the_scraped_port() -> None:
    service = read_unit(FILES / "gpuforge-node-exporter.service")["Service"]
    assert service["ExecStart"] == (
        f"/usr/local/bin/node_exporter --collector.textfile.directory={Path(DEFAULT_OUT).parent}"
    )
    assert service["ExecStartPre"] == f"+/bin/mkdir -p {Path(DEFAULT_OUT).parent}"
    assert service["User"] == USERS["node_exporter"]
    assert NODE_EXPORTER_PORT == 9100  # node_exporter's default --web.listen-address, which the unit keeps


def test_the_controllers_daemons_start_only_where_their_config_is() -> None:
    config_dir = _lib_value("MONITORING_CONFIG_DIR")
    prometheus = read_unit(FILES / "gpuforge-prometheus.service")
    assert (
        f"ConditionPathExists={config_dir}/prometheus.yml"
        in (FILES / "gpuforge-prometheus.service").read_text()
    )
    assert prometheus["Service"]["ExecStart"].split() == [
        "/usr/local/bin/prometheus",
        f"--config.file={config_dir}/prometheus.yml",
        "--storage.tsdb.path=/var/lib/gpuforge/prometheus",
        f"@{config_dir}/prometheus.flags",
    ]
    alertmanager = read_unit(FILES / "gpuforge-alertmanager.service")
    assert alertmanager["Unit"]["ConditionPathExists"] == f"{config_dir}/alertmanager.yml"
    assert f"--web.listen-address={ALERTMANAGER}" in alertmanager["Service"]["ExecStart"].split()
    assert f"--config.file={config_dir}/alertmanager.yml" in alertmanager["Service"]["ExecStart"].split()
    for unit, user in (("prometheus", "prometheus"), ("alertmanager", "alertmanager")):
        service = read_unit(FILES / f"gpuforge-{unit}.service")["Service"]
        assert (service["User"], service["StateDirectory"]) == (user, f"gpuforge/{unit}")


def test_the_image_installs_the_controllers_units_without_enabling_them() -> None:
    """85-gpuforge.sh's loop, run over images/files with install and systemctl replaced by a log."""
    script = (SCRIPTS / "85-gpuforge.sh").read_text()
    loop = re.search(r'\nfor unit in "\$GPUFORGE_PAYLOAD"/files/\*; do\n.*?\ndone\n', script, re.S)
    assert loop is not None
    program = (
        'install() { echo "install ${*: -1}"; }\nsystemctl() { echo "systemctl $*"; }\ndie() { echo "die $*"; exit 1; }\n'
        f"GPUFORGE_PAYLOAD={REPO / 'images'}\n{loop.group(0)}"
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=True)
    lines = done.stdout.splitlines()
    assert "systemctl enable gpuforge-node-exporter.service" in lines
    for unit in ("gpuforge-prometheus.service", "gpuforge-alertmanager.service"):
        assert f"install /etc/systemd/system/{unit}" in lines
        assert not [line for line in lines if line.startswith("systemctl") and unit in line]
    assert "install /etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuforge-fields.conf" in lines


def test_dcgm_exporter_is_pointed_at_gpuforges_field_list() -> None:
    service = read_unit(FIELDS_DROPIN)["Service"]
    lines = [line for line in FIELDS_DROPIN.read_text().splitlines() if line.startswith("ExecStart=")]
    assert lines == ["ExecStart=", f"ExecStart=/usr/bin/dcgm-exporter -f {_lib_value('DCGM_FIELDS_FILE')}"]
    assert service["ExecStart"].endswith(_lib_value("DCGM_FIELDS_FILE"))


def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    etc = systemd_root(
        tmp_path,
        [
            "usr/local/bin/node_exporter",
            "usr/local/bin/prometheus",
            "usr/local/bin/alertmanager",
            "usr/bin/dcgm-exporter",
            "bin/mkdir",
            "bin/kill",
        ],
    )
    (etc / "nvidia-dcgm-exporter.service.d").mkdir()
    for unit in UNITS:
        shutil.copy(FILES / unit, etc / unit)
    (etc / "nvidia-dcgm-exporter.service").write_text(DCGM_EXPORTER_UNIT)
    shutil.copy(FIELDS_DROPIN, etc / "nvidia-dcgm-exporter.service.d/gpuforge-fields.conf")

    for name in (*UNITS, "nvidia-dcgm-exporter.service"):
        done = verify(tmp_path, name)
        assert (name, done.returncode, done.stderr) == (name, 0, "")
    # the same check notices a broken unit, so the clean verdicts above mean something
    broken = etc / "gpuforge-prometheus.service"
    broken.write_text(
        broken.read_text().replace("/usr/local/bin/prometheus --", "/usr/local/bin/no-such-prometheus --")
    )
    done = verify(tmp_path, "gpuforge-prometheus.service")
    assert done.returncode != 0 and "no-such-prometheus" in done.stderr


# --- the flags, read by the real binaries of the monitoring test root (tests/monitoring_tools.py) ---


def _parses(binary: Path, arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """Every flag parsed by the binary's own command line (kingpin), then --version exits without starting."""
    return subprocess.run(
        [str(binary), *arguments, "--version"], capture_output=True, text=True, timeout=30, check=False
    )


def _exec_start(unit: str) -> list[str]:
    return str(read_unit(FILES / unit)["Service"]["ExecStart"]).split()[1:]


def test_the_real_prometheus_reads_the_units_flags_and_the_rendered_flags_file(tmp_path: Path) -> None:
    prometheus = tool("prometheus")
    from gpuforge.monitoring.cli import render_set

    _, files = render_set(load_stack_config(REPO / "stacks/training", "p5-prod"))
    flags = tmp_path / "prometheus.flags"
    flags.write_text(files["prometheus.flags"])
    arguments = [
        arg.replace(f"@{_lib_value('MONITORING_CONFIG_DIR')}/prometheus.flags", f"@{flags}")
        for arg in _exec_start("gpuforge-prometheus.service")
    ]
    done = _parses(prometheus, arguments)
    assert done.returncode == 0, done.stderr
    matrix, _ = load_valid(MATRICES / "p5-h100-cuda12.yaml")  # the matrices agree (monitoring-root.sh)
    assert matrix.prometheus is not None
    assert (done.stdout + done.stderr).startswith(f"prometheus, version {matrix.prometheus.version} (")
    flags.write_text(files["prometheus.flags"] + "--no.such.flag=1\n")  # the file is read, not skipped
    refused = _parses(prometheus, arguments)
    assert "unknown long flag '--no.such.flag'" in refused.stderr


def test_the_real_alertmanager_and_node_exporter_take_the_units_flags() -> None:
    alertmanager = tool("prometheus-alertmanager")
    for binary, unit in (
        (alertmanager, "gpuforge-alertmanager.service"),
        (tool("prometheus-node-exporter"), "gpuforge-node-exporter.service"),
    ):
        done = _parses(binary, _exec_start(unit))
        assert done.returncode == 0 and ", version " in done.stdout + done.stderr, (unit, done.stderr)
        bogus = _parses(binary, [*_exec_start(unit), "--no.such.flag"])
        assert "unknown long flag '--no.such.flag'" in bogus.stderr


# --- the verification step ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def p5_payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    out = tmp_path_factory.mktemp("render") / "out"
    return render(matrix, digest, RenderOptions(region="us-east-1", imds=False), out).payload


def _verify_with(payload: Path, tmp_path: Path, change: Any) -> subprocess.CompletedProcess[str]:
    from test_image_verify_script import _recording, _verify

    node = _recording()
    change(node)
    done, _, _ = _verify(payload, node, tmp_path)
    return done


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda node: node["commands"].update(
                {"promtool --version": "promtool, version 3.4.2 (branch: HEAD, revision: x)\n"}
            ),
            "prometheus: /opt/gpuforge/prometheus-3.13.4/promtool --version reports 'promtool, version 3.4.2 "
            "(branch: HEAD, revision: x)', the matrix pins prometheus 3.13.4",
        ),
        (
            lambda node: node["links"].update({"usr/local/bin/alertmanager": "/usr/bin/alertmanager"}),
            "alertmanager: /usr/local/bin/alertmanager points at '/usr/bin/alertmanager', not "
            "/opt/gpuforge/alertmanager-0.33.1/alertmanager",
        ),
        (
            lambda node: node["commands"].update(
                {"systemctl is-enabled gpuforge-prometheus.service": "enabled\n"}
            ),
            "prometheus: gpuforge-prometheus.service is 'enabled', the image installs it disabled",
        ),
        (
            lambda node: node["commands"].pop("systemctl is-enabled gpuforge-node-exporter.service"),
            "node_exporter: gpuforge-node-exporter.service is 'not installed', the image installs it enabled",
        ),
        (
            lambda node: node["commands"].pop("getent passwd node-exporter"),
            "node_exporter: there is no node-exporter user to run it",
        ),
        (
            lambda node: node["files"].pop(
                "etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuforge-fields.conf"
            ),
            "dcgm_exporter: nvidia-dcgm-exporter.service is not pointed at /etc/gpuforge/dcgm-exporter-fields.csv",
        ),
    ],
    ids=["version", "link", "controller-unit-enabled", "node-exporter-not-enabled", "user", "fields-dropin"],
)
def test_verification_reports_a_monitoring_difference(
    p5_payload: Path, tmp_path: Path, change: Any, expected: str
) -> None:
    done = _verify_with(p5_payload, tmp_path, change)
    assert done.returncode == 1
    assert f"gpuforge: verify: {expected}" in done.stderr
