"""The in-image verification step (images/scripts/90-verify.sh) against a recorded node.

The script is the real one from a real render. The node is not: `uname`,
`modinfo`, `dpkg-query`, `ldconfig`, `fi_info`, `systemctl`, `apt-mark`,
`slurmd` and `getent` describe a GPU image that this test machine is not, so
they are replaced on PATH by a replayer of
tests/fixtures/images/node-p5-h100-cuda12.json, and the files and folders the
script reads are laid out under GPUFORGE_ROOT. Everything else
(bash, grep, sed, awk, readlink) is the machine's own.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from image_helpers import FIXTURES, MATRICES, REPO, base_path, load_matrix_data, write_matrix

from gpuforge.images import rds_ca
from gpuforge.images.matrix import load_valid
from gpuforge.images.render import RenderOptions, render
from gpuforge.images.tags import component_versions
from gpuforge.node.manifest import load_manifest
from gpuforge.scheduler.render import RDS_CA_BUNDLE

RECORDING = FIXTURES / "node-p5-h100-cuda12.json"
REPLAYED = (
    "uname",
    "modinfo",
    "dpkg-query",
    "ldconfig",
    "fi_info",
    "systemctl",
    "apt-mark",
    "slurmd",
    "getent",
    # the monitoring daemons' binaries, for their --version (images/scripts/77-monitoring.sh)
    "node_exporter",
    "prometheus",
    "promtool",
    "alertmanager",
    "amtool",
    # the Kubernetes node parts, for their --version (images/scripts/72-kubernetes.sh)
    "kubelet",
    "containerd",
    "runc",
)
REPLAYER = """#!/usr/bin/env bash
key="$(basename "$0")"
for arg in "$@"; do key+=" $arg"; done
id="$(printf '%s' "$key" | sha256sum | cut -c1-32)"
if [[ -f "$REPLAY_DIR/$id.out" ]]; then
    cat "$REPLAY_DIR/$id.out"
    exit 0
fi
printf '%s\\n' "$key" >>"$REPLAY_DIR/unrecorded.log"
echo "$(basename "$0"): no such package, module or unit (no recording for: $key)" >&2
exit 1
"""

Node = dict[str, Any]


def _recording() -> Node:
    data: Node = json.loads(RECORDING.read_text(encoding="utf-8"))
    _add_kubernetes_parts(data)
    # The Amazon RDS CA bundle as 45-slurm.sh installs it (lib.sh install_rds_ca_bundle).
    data["files"][RDS_CA_BUNDLE.lstrip("/")] = rds_ca.BUNDLE_FILE.read_text(encoding="ascii")
    return data


def _add_kubernetes_parts(node: Node) -> None:
    """The Kubernetes node parts of the p5 matrix as 72-kubernetes.sh leaves them, added to the recording.

    Each --version line is the format the pinned release's own source prints (90-verify.sh's check_kubernetes
    names where): kubelet "Kubernetes v1.35.8" (k8s.io/component-base v0.35.8 version/verflag: "%s %s",
    "Kubernetes", the GitVersion); runc "runc version 1.4.3" first (opencontainers/runc v1.4.3 main.go);
    containerd "containerd github.com/containerd/containerd/v2 v2.3.4 <revision>" (cmd/containerd/command/
    main.go, with version.Version set to `git describe` by its Makefile: v2.3.4 for the release tag); the
    revision is left empty, as in a build of the v2.3.4 module with that -X flag and no revision, because
    the release's commit could not be read here; the loopback CNI plugin "CNI loopback plugin v1.9.1" and its
    protocol line (containernetworking/cni v1.3.0 pkg/skel; plugins v1.9.1 buildversion, BuildVersion set to
    the tag by .github/workflows/release.yaml)."""
    node["commands"] |= {
        "kubelet --version": "Kubernetes v1.35.8\n",
        "containerd --version": "containerd github.com/containerd/containerd/v2 v2.3.4 \n",
        "runc --version": "runc version 1.4.3\n",
        "loopback": "CNI loopback plugin v1.9.1\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n",
        "systemctl is-enabled kubelet.service": "enabled\n",
        "systemctl is-active kubelet.service": "inactive\n",
        # 72-kubernetes.sh installs the periodic check's units without enabling them (the EKS join does).
        "systemctl is-enabled gpuforge-kubernetes-check.service": "disabled\n",
        "systemctl is-enabled gpuforge-kubernetes-check.timer": "disabled\n",
    }
    config = (REPO / "images/files/kubernetes/containerd-config.toml").read_text(encoding="utf-8")
    gate = (REPO / "images/files/kubernetes/kubelet-gpuforge.conf").read_text(encoding="utf-8")
    node["files"] |= {
        "etc/containerd/config.toml": config,
        "etc/systemd/system/kubelet.service.d/gpuforge.conf": gate,
    }
    node.setdefault("replayed", []).extend(
        [
            "usr/local/bin/kubelet",
            "usr/local/bin/containerd",
            "usr/local/sbin/runc",
            "opt/cni/bin/loopback",
            "usr/local/bin/aws-iam-authenticator",
            "usr/local/libexec/kubelet-credential-providers/ecr-credential-provider",
        ]
    )


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    out = tmp_path_factory.mktemp("render") / "out"
    return render(matrix, digest, RenderOptions(region="us-east-1", imds=False), out).payload


def _lay_out(node: Node, base: Path) -> tuple[Path, Path, Path]:
    bin_dir, replay, root = base / "bin", base / "replay", base / "root"
    for folder in (bin_dir, replay, root):
        folder.mkdir()
    for name in REPLAYED:
        stub = bin_dir / name
        stub.write_text(REPLAYER, encoding="utf-8")
        stub.chmod(0o755)
    for key, output in node["commands"].items():
        identifier = hashlib.sha256(key.encode()).hexdigest()[:32]
        (replay / f"{identifier}.out").write_text(output, encoding="utf-8")
    for relative, content in node["files"].items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    for relative, points_to in node["links"].items():
        link = root / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(points_to)
    for relative in node.get("dirs", []):
        (root / relative).mkdir(parents=True, exist_ok=True)
    # Executables the script runs (or tests) by path under the root: each a replayer of its own recording.
    for relative in node.get("replayed", []):
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(REPLAYER, encoding="utf-8")
        target.chmod(0o755)
    return bin_dir, replay, root


def _verify(payload: Path, node: Node, base: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    bin_dir, replay, root = _lay_out(node, base)
    env = {
        "PATH": f"{bin_dir}:{base_path(bin_dir.parent / 'base-bin')}",
        "GPUFORGE_ROOT": str(root),
        "REPLAY_DIR": str(replay),
        "LC_ALL": "C",
    }
    done = subprocess.run(
        ["bash", str(payload / "scripts" / "90-verify.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, root, replay


def test_a_node_that_matches_the_matrix_passes_and_gets_the_manifest(payload: Path, tmp_path: Path) -> None:
    done, root, replay = _verify(payload, _recording(), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (replay / "unrecorded.log").exists(), (replay / "unrecorded.log").read_text()

    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    manifest_path = root / "etc" / "gpuforge" / "manifest.json"
    written = json.loads(manifest_path.read_text())
    assert written == {
        "schema": 1,
        "matrix": {"name": matrix.name, "version": matrix.version, "digest": digest},
        "targets": matrix.targets,
        "components": {
            "kernel": matrix.kernel,
            "nvidia_driver": matrix.nvidia.driver,
            "nvidia_kernel_modules": "open",
            "fabricmanager": matrix.nvidia.fabricmanager,
            "cuda": matrix.cuda,
            "cudnn": matrix.cudnn,
            "nccl": matrix.nccl,
            "efa_installer": matrix.efa.installer,
            "libfabric": "2.4.0amzn1.0",
            "aws_ofi_nccl": matrix.aws_ofi_nccl.version,
            "lustre_client": matrix.lustre_client,
            "container_toolkit": matrix.container_toolkit,
            "dcgm": matrix.dcgm,
            "slurm": "26.05.5",
            "pmix": "5.0.3",
            "nccl_tests": "2.17.6",
            "node_exporter": "1.11.1",
            "prometheus": "3.13.4",
            "alertmanager": "0.33.1",
        },
    }
    # Every component value equals the matrix's pin (the AMI tags carry the same values).
    tags = component_versions(matrix)
    assert written["components"]["cuda"] == tags["cuda"] and written["components"]["nccl"] == tags["nccl"]
    assert written["components"]["slurm"] == tags["slurm"] and written["components"]["pmix"] == tags["pmix"]
    # The node agent reads what the image pipeline writes.
    assert load_manifest(manifest_path).nvidia_driver == matrix.nvidia.driver
    assert {key: load_manifest(manifest_path).components[key] for key, _ in matrix.monitoring_tarballs} == {
        key: pin.version for key, pin in matrix.monitoring_tarballs
    }
    # The SBOM's package list: installed packages only (not the removed one), as dpkg-query reads them.
    listed = (root / "etc" / "gpuforge" / "packages.tsv").read_text().splitlines()
    assert f"libnccl2\t{matrix.nccl}\tamd64" in listed
    assert len(listed) == 10 and not any("nvidia-driver-550" in line for line in listed)


def _set(command: str, output: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        node["commands"][command] = output

    return change


def _drop(command: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        del node["commands"][command]

    return change


def _older_nccl(node: Node) -> None:
    node["commands"]["dpkg-query -W -f=${db:Status-Abbrev} ${Version} libnccl2"] = "ii  2.26.2-1+cuda12.8"
    node["files"]["usr/lib/x86_64-linux-gnu/libnccl.so.2.26.2"] = "\x7fELF\n"
    node["links"]["usr/lib/x86_64-linux-gnu/libnccl.so.2"] = "libnccl.so.2.26.2"


def _nccl_library_only(node: Node) -> None:
    """The package is right, but the library NCCL loads is another (e.g. a copy in /usr/local)."""
    node["files"]["usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"] = "\x7fELF\n"
    node["links"]["usr/lib/x86_64-linux-gnu/libnccl.so.2"] = "libnccl.so.2.21.5"


def _plugin_elsewhere(node: Node) -> None:
    node["commands"]["ldconfig -p"] = node["commands"]["ldconfig -p"].replace(
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so", "/usr/local/lib/libnccl-net-ofi.so"
    )


def _loaded_driver_differs(node: Node) -> None:
    node["files"]["proc/driver/nvidia/version"] = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  Release Build\n"
    )


def _pmix_header(major: str, minor: str, release: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        node["files"]["opt/pmix/include/pmix_version.h"] = (
            f"#define PMIX_VERSION_MAJOR {major}L\n#define PMIX_VERSION_MINOR {minor}L\n"
            f"#define PMIX_VERSION_RELEASE {release}L\n"
        )

    return change


def _no_pmix(node: Node) -> None:
    for relative in [key for key in node["files"] if key.startswith("opt/pmix/")]:
        del node["files"][relative]
    del node["links"]["opt/pmix/lib/libpmix.so"]


def _drop_file(relative: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        del node["files"][relative]

    return change


def _drop_replayed(relative: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        node["replayed"].remove(relative)

    return change


def _set_file(relative: str, content: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        node["files"][relative] = content

    return change


def _plugin_for_pmix_4(node: Node) -> None:
    """Slurm was built against another PMIx (a system PMIx 4 found before /opt/pmix)."""
    node["files"]["usr/lib/slurm/mpi_pmix_v4.so"] = node["files"].pop("usr/lib/slurm/mpi_pmix_v5.so")


def _drop_dir(relative: str) -> Callable[[Node], None]:
    def change(node: Node) -> None:
        node["dirs"].remove(relative)

    return change


DPKG = "dpkg-query -W -f=${db:Status-Abbrev} ${Version} "
CASES: dict[str, tuple[Callable[[Node], None], list[str]]] = {
    "driver-module-mismatch": (
        _set("modinfo -k 6.8.0-1015-aws -F version nvidia", "580.82.07\n"),
        ["nvidia_driver:", "580.82.07", "580.95.05"],
    ),
    "module-flavour": (
        _set("modinfo -k 6.8.0-1015-aws -F license nvidia", "NVIDIA\n"),
        ["nvidia_kernel_modules:", "proprietary", "open"],
    ),
    "no-module-for-kernel": (
        _drop("modinfo -k 6.8.0-1015-aws -F version nvidia"),
        ["nvidia_driver: no nvidia module is built for kernel 6.8.0-1015-aws"],
    ),
    "wrong-kernel": (_set("uname -r", "6.8.0-1016-aws\n"), ["kernel: running 6.8.0-1016-aws"]),
    "missing-package": (
        _drop(DPKG + "libcudnn9-cuda-12"),
        ["cudnn: package libcudnn9-cuda-12 is not installed"],
    ),
    "wrong-nccl": (_older_nccl, ["nccl: package libnccl2 is 2.26.2-1+cuda12.8", "libnccl.so.2.26.2"]),
    "nccl-loads-another-library": (_nccl_library_only, ["nccl: NCCL loads", "libnccl.so.2.21.5"]),
    "fabricmanager-version": (
        _set(DPKG + "nvidia-fabricmanager-580", "ii  580.82.07-1"),
        ["fabricmanager: package nvidia-fabricmanager-580 is 580.82.07-1"],
    ),
    "libfabric": (
        _set("fi_info --version", "fi_info: 2.1.0amzn5.0\nlibfabric: 2.1.0amzn5.0\n"),
        ["libfabric: fi_info reports libfabric '2.1.0amzn5.0'"],
    ),
    "plugin-outside-prefix": (
        _plugin_elsewhere,
        ["aws_ofi_nccl: NCCL loads /usr/local/lib/libnccl-net-ofi.so"],
    ),
    "loaded-driver": (_loaded_driver_differs, ["nvidia_driver: the loaded driver reports"]),
    "slurm-version": (
        _set("slurmd -V", "slurm 25.11.3\n"),
        ["slurm: slurmd -V reports 'slurm 25.11.3', the matrix pins slurm 26.05.5"],
    ),
    "no-slurmd": (_drop("slurmd -V"), ["slurm: slurmd -V reports 'nothing'"]),
    "pmix-version": (
        _pmix_header("4", "2", "9"),
        ["pmix: the PMIx installed in /opt/pmix is 4.2.9, the matrix pins 5.0.3"],
    ),
    "no-pmix": (_no_pmix, ["pmix: no PMIx version in /opt/pmix/include/pmix_version.h"]),
    "pmix-plugin-of-another-major": (
        _plugin_for_pmix_4,
        ["slurm: no Slurm plugin /usr/lib/slurm/mpi_pmix_v5.so"],
    ),
    "no-nvml-plugin": (
        _drop_file("usr/lib/slurm/gpu_nvml.so"),
        ["slurm: no Slurm plugin /usr/lib/slurm/gpu_nvml.so"],
    ),
    "slurmd-enabled": (
        _set("systemctl is-enabled slurmd.service", "enabled\n"),
        ["slurm: slurmd.service is 'enabled'; the image installs it disabled"],
    ),
    "slurmctld-missing": (
        _drop("systemctl is-enabled slurmctld.service"),
        ["slurm: slurmctld.service is 'not installed'"],
    ),
    "no-mysql-plugin": (
        _drop_file("usr/lib/slurm/accounting_storage_mysql.so"),
        ["slurm: no Slurm plugin /usr/lib/slurm/accounting_storage_mysql.so"],
    ),
    "slurmdbd-enabled": (
        _set("systemctl is-enabled slurmdbd.service", "enabled\n"),
        ["slurm: slurmdbd.service is 'enabled'; the image installs it disabled"],
    ),
    "mariadb-enabled": (
        _set("systemctl is-enabled mariadb.service", "enabled\n"),
        ["slurm: mariadb.service is 'enabled'; the image installs it disabled"],
    ),
    "sync-accounts-enabled": (
        _set("systemctl is-enabled gpuforge-sync-accounts.service", "enabled\n"),
        ["slurm: gpuforge-sync-accounts.service is 'enabled'; the image installs it disabled"],
    ),
    "ecr-credential-provider-missing": (
        _drop_replayed("usr/local/libexec/kubelet-credential-providers/ecr-credential-provider"),
        [
            "ecr-credential-provider: /usr/local/libexec/kubelet-credential-providers/ecr-credential-provider "
            "is missing (72-kubernetes.sh installs it)"
        ],
    ),
    "kubernetes-check-timer-missing": (
        _drop("systemctl is-enabled gpuforge-kubernetes-check.timer"),
        ["kubelet: gpuforge-kubernetes-check.timer is 'not installed'; the image installs it disabled"],
    ),
    "mariadb-version": (
        _set(DPKG + "mariadb-server", "ii  1:10.6.22-0ubuntu0.22.04.1"),
        [
            "mariadb: package mariadb-server is 1:10.6.22-0ubuntu0.22.04.1, the matrix pins 1:10.6.23-0ubuntu0.22.04.1"
        ],
    ),
    "no-mariadb-client-library": (
        _drop(DPKG + "libmariadb3"),
        ["mariadb: package libmariadb3 is not installed"],
    ),
    "kubelet-version": (
        _set("kubelet --version", "Kubernetes v1.35.7\n"),
        ["kubelet: /usr/local/bin/kubelet --version reports 'Kubernetes v1.35.7', the matrix pins 1.35.8"],
    ),
    "containerd-version": (
        _set("containerd --version", "containerd github.com/containerd/containerd/v2 v2.3.3 \n"),
        ["containerd: /usr/local/bin/containerd --version reports"],
    ),
    "runc-version": (
        _set("runc --version", "runc version 1.4.2\n"),
        ["runc: /usr/local/sbin/runc --version"],
    ),
    "cni-version": (
        _set("loopback", "CNI loopback plugin v1.8.0\n"),
        ["cni_plugins: /opt/cni/bin/loopback reports 'CNI loopback plugin v1.8.0', the matrix pins 1.9.1"],
    ),
    "containerd-default-runtime": (
        _set_file("etc/containerd/config.toml", "version = 3\n"),
        ["containerd: /etc/containerd/config.toml does not make the NVIDIA runtime the default"],
    ),
    "kubelet-ungated": (
        _drop_file("etc/systemd/system/kubelet.service.d/gpuforge.conf"),
        ["kubelet: the kubelet has no boot gate"],
    ),
    "kubelet-disabled": (
        _set("systemctl is-enabled kubelet.service", "disabled\n"),
        ["kubelet: kubelet.service is 'disabled', it must be enabled"],
    ),
    "kubelet-running": (
        _set("systemctl is-active kubelet.service", "active\n"),
        ["kubelet: kubelet.service is running on the build instance"],
    ),
    "no-slurm-user": (_drop("getent passwd slurm"), ["slurm: there is no slurm user"]),
    "rds-ca-missing": (
        _drop_file(RDS_CA_BUNDLE.lstrip("/")),
        [f"rds_ca: no {RDS_CA_BUNDLE} (45-slurm.sh installs the Amazon RDS CA bundle there)"],
    ),
    "rds-ca-changed": (
        _set_file(RDS_CA_BUNDLE.lstrip("/"), "-----BEGIN CERTIFICATE-----\n"),
        [f"rds_ca: {RDS_CA_BUNDLE} has sha256 ", f"gpuforge pins {rds_ca.BUNDLE_SHA256}"],
    ),
    "no-spool": (_drop_dir("var/spool/slurmctld"), ["slurm: folder /var/spool/slurmctld is missing"]),
    "not-held": (
        _set("apt-mark showhold", "libnccl2\n"),
        ["hold: cuda-toolkit-12-9 is not held"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_difference_fails_the_build_naming_the_component(payload: Path, tmp_path: Path, case: str) -> None:
    change, expected = CASES[case]
    node = copy.deepcopy(_recording())
    change(node)
    done, root, _ = _verify(payload, node, tmp_path)
    assert done.returncode == 1
    for text in expected:
        assert text in done.stderr, done.stderr
    assert "image verification failed" in done.stderr
    assert not (root / "etc" / "gpuforge" / "manifest.json").exists()


def test_several_differences_are_all_reported(payload: Path, tmp_path: Path) -> None:
    node = copy.deepcopy(_recording())
    _set("uname -r", "6.8.0-1016-aws\n")(node)
    _older_nccl(node)
    done, _, _ = _verify(payload, node, tmp_path)
    assert done.returncode == 1
    reported = [line for line in done.stderr.splitlines() if line.startswith("gpuforge: verify: ")]
    assert [line.split(":")[2].strip() for line in reported] == ["kernel", "nccl", "nccl"]
    assert "3 difference(s)" in done.stderr


def test_a_matrix_without_slurm_skips_the_slurm_checks_and_leaves_it_out_of_the_manifest(
    tmp_path: Path,
) -> None:
    data = load_matrix_data()
    del data["slurm"], data["pmix"], data["mariadb"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    node = copy.deepcopy(_recording())
    for command in ("slurmd -V", "getent passwd slurm"):
        del node["commands"][command]
    node["dirs"] = []
    base = tmp_path / "node"
    base.mkdir()
    done, root, replay = _verify(payload, node, base)
    assert done.returncode == 0, done.stderr
    assert not (replay / "unrecorded.log").exists(), (replay / "unrecorded.log").read_text()
    components = json.loads((root / "etc" / "gpuforge" / "manifest.json").read_text())["components"]
    assert "slurm" not in components and "pmix" not in components


def test_the_script_runs_under_strict_bash_settings() -> None:
    scripts = sorted((Path(__file__).resolve().parents[2] / "images" / "scripts").glob("[0-9]*.sh"))
    assert scripts
    for script in scripts:
        assert "\nset -euo pipefail\n" in script.read_text(), script.name
    assert os.access(scripts[-1], os.X_OK)


@pytest.mark.parametrize("installed", [True, False])
def test_pinned_nccl_tests_must_be_installed(payload: Path, tmp_path: Path, installed: bool) -> None:
    node = copy.deepcopy(_recording())
    if not installed:
        for name in ("all_reduce_perf", "all_gather_perf"):
            del node["links"][f"usr/local/bin/{name}"]
    done, root, _ = _verify(payload, node, tmp_path)
    if installed:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 1
        assert "gpuforge: verify: nccl_tests: no /usr/local/bin/all_reduce_perf" in done.stderr
        assert not (root / "etc" / "gpuforge" / "manifest.json").exists()


def test_a_matrix_without_nccl_tests_skips_their_check_and_leaves_them_out_of_the_manifest(
    tmp_path: Path,
) -> None:
    data = load_matrix_data()
    del data["nccl_tests"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    node = copy.deepcopy(_recording())
    for name in ("all_reduce_perf", "all_gather_perf"):
        del node["links"][f"usr/local/bin/{name}"]
    base = tmp_path / "node"
    base.mkdir()
    done, root, _ = _verify(payload, node, base)
    assert done.returncode == 0, done.stderr
    assert (
        "nccl_tests"
        not in json.loads((root / "etc" / "gpuforge" / "manifest.json").read_text())["components"]
    )


def test_a_matrix_without_a_monitoring_daemon_leaves_it_out_of_the_manifest(tmp_path: Path) -> None:
    data = load_matrix_data()
    del data["alertmanager"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    base = tmp_path / "node"
    base.mkdir()
    done, root, _ = _verify(payload, copy.deepcopy(_recording()), base)
    assert done.returncode == 0, done.stderr
    components = json.loads((root / "etc" / "gpuforge" / "manifest.json").read_text())["components"]
    assert "alertmanager" not in components
    assert (components["node_exporter"], components["prometheus"]) == ("1.11.1", "3.13.4")
