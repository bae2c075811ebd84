"""The monitoring test root runs what the image matrices pin (scripts/monitoring-root.sh): Prometheus
and promtool at the pinned release (built from the Go module; Debian has only 3.5.3), Alertmanager and
node_exporter of the pinned series (Debian forky's builds); the matrices must agree on each pin."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from monitoring_support import REPO, tool

SCRIPT = REPO / "scripts" / "monitoring-root.sh"
MATRICES = REPO / "images" / "matrices"
KEYS = ("prometheus", "alertmanager", "node_exporter")


def _pins(folder: Path = MATRICES) -> dict[str, str]:
    """Each monitoring pin, read from the matrices independently of the script; they agree."""
    found: dict[str, set[str]] = {key: set() for key in KEYS}
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for key in KEYS:
            if isinstance(data.get(key), dict):
                found[key].add(str(data[key]["version"]))
    assert all(len(versions) == 1 for versions in found.values()), found
    return {key: versions.pop() for key, versions in found.items()}


def _script(*arguments: str, matrices: Path = MATRICES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "GPUFORGE_MATRIX_DIR": str(matrices)},
    )


def _first_line(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return (done.stdout + done.stderr).splitlines()[0]


def test_the_roots_prometheus_and_promtool_are_the_matrixs_pinned_release() -> None:
    pinned = _pins()["prometheus"]
    for name in ("prometheus", "promtool"):
        assert _first_line(tool(name)).startswith(f"{name}, version {pinned} ("), name


def test_the_roots_alertmanager_and_node_exporter_are_the_pinned_series() -> None:
    pins = _pins()
    for binary, name, key in (
        ("prometheus-alertmanager", "alertmanager", "alertmanager"),
        ("prometheus-node-exporter", "node_exporter", "node_exporter"),
    ):
        series = pins[key].rsplit(".", 1)[0]
        assert _first_line(tool(binary)).startswith(f"{name}, version {series}."), binary


def test_the_tools_come_from_gpuforge_monitoring_root_when_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = tmp_path / "usr" / "bin" / "promtool"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("GPUFORGE_MONITORING_ROOT", str(tmp_path))
    assert tool("promtool") == stand_in
    monkeypatch.delenv("GPUFORGE_MONITORING_ROOT")
    assert tool("promtool") == REPO / ".cache" / "monitoring-root" / "usr" / "bin" / "promtool"


def test_the_script_takes_its_pins_from_the_matrices() -> None:
    done = _script("--pins")
    assert done.returncode == 0, done.stderr
    assert dict(line.split(" ", 1) for line in done.stdout.splitlines()) == _pins()


def test_matrices_that_pin_different_prometheus_releases_are_refused(tmp_path: Path) -> None:
    for name in ("p5-h100-cuda12.yaml", "g6-dev-cuda12.yaml"):
        shutil.copy(MATRICES / name, tmp_path / name)
    other = tmp_path / "g6-dev-cuda12.yaml"
    data = yaml.safe_load(other.read_text(encoding="utf-8"))
    pinned = data["prometheus"]["version"]
    data["prometheus"]["version"] = "3.5.3"
    other.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = _script("--pins", matrices=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert "prometheus.version" in done.stderr and "pin one version in every matrix" in done.stderr
    assert "3.5.3 in g6-dev-cuda12.yaml" in done.stderr and f"{pinned} in p5-h100-cuda12.yaml" in done.stderr


def test_matrices_that_pin_no_prometheus_are_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((MATRICES / "p5-h100-cuda12.yaml").read_text(encoding="utf-8"))
    del data["prometheus"]
    (tmp_path / "p5.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    done = _script("--pins", matrices=tmp_path)
    assert done.returncode == 1 and "no matrix pins prometheus.version" in done.stderr


# Release -> Go module version, each pair as the Go module proxy lists it for
# github.com/prometheus/prometheus (https://proxy.golang.org/github.com/prometheus/prometheus/@v/list);
# v0.313.2's own VERSION file reads 3.13.2. The rule is the module's scripts/get_module_version.sh.
@pytest.mark.parametrize(
    ("release", "module"),
    [
        ("3.13.2", "v0.313.2"),
        ("3.5.1", "v0.305.1"),
        ("3.0.0", "v0.300.0"),
        ("2.54.1", "v0.54.1"),
        ("3.14.0-rc.0", "v0.314.0-rc.0"),
    ],
)
def test_a_prometheus_release_maps_to_its_go_module_version(release: str, module: str) -> None:
    done = _script("--module-version", release)
    assert (done.returncode, done.stdout) == (0, f"{module}\n"), done.stderr


@pytest.mark.parametrize("release", ["4.0.0", "1.8.2", "3.100.0", "latest", "3.13"])
def test_a_release_without_a_known_module_version_is_refused(release: str) -> None:
    done = _script("--module-version", release)
    assert done.returncode == 1 and done.stdout == "" and release in done.stderr
