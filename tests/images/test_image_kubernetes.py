"""The Kubernetes node parts in the image: 72-kubernetes.sh, containerd's configuration, the kubelet's units.

The step runs in real bash from a real render, against a scratch root (GPUFORGE_ROOT), with curl and
systemctl replaced on PATH: curl copies a local stand-in of each release file (a kubelet, a containerd
tarball with bin/, a runc, a CNI plugin tarball), whose sha256 the test's matrix pins, and every call is
logged. The kubelet's boot gate is checked by systemd's own `systemd-analyze verify`, as slurmd's is
(tests/node/test_node_slurmd_dropin.py).
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import re
import shlex
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from botocore.loaders import create_loader
from botocore.regions import EndpointResolver
from image_helpers import REPO, base_path, load_matrix_data, write_matrix
from systemd_units import read_unit

from gpuforge.images.matrix import KUBERNETES_KEYS, load_valid
from gpuforge.images.render import STEPS, RenderOptions, render
from gpuforge.regions import aws_regions

SCRIPTS = REPO / "images" / "scripts"
FILES = REPO / "images" / "files" / "kubernetes"
SLURMD_GATE = REPO / "images" / "files" / "slurmd-gpuforge.conf"
CHECK_UNIT = REPO / "images" / "files" / "gpuforge-node-check.service"

CURL = (
    "while [[ $# -gt 1 ]]; do if [[ $1 == -o ]]; then out=$2; fi; shift; done; "
    'cp "$FAKE_RELEASES/$(basename "$1")" "$out"'
)
TOOLS = {"curl": CURL, "systemctl": "exit 0"}


def _tarball(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _releases(directory: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Stand-in release files named as the matrix's URLs name them; the matrix's sha256s set to theirs."""
    directory.mkdir()
    bodies = {
        "kubelet": b"#!/bin/sh\necho kubelet\n",
        "containerd": _tarball(
            {"bin/containerd": "#!/bin/sh\n", "bin/containerd-shim-runc-v2": "#!/bin/sh\n"}
        ),
        "runc": b"#!/bin/sh\necho runc\n",
        "cni_plugins": _tarball({"./loopback": "#!/bin/sh\n", "./bridge": "#!/bin/sh\n"}),
        "aws_iam_authenticator": b"#!/bin/sh\necho authenticator\n",
        "ecr_credential_provider": b"#!/bin/sh\necho ecr-credential-provider\n",
    }
    for key, body in bodies.items():
        pin = data["kubernetes"][key]
        (directory / pin["url"].rsplit("/", 1)[-1]).write_bytes(body)
        pin["sha256"] = hashlib.sha256(body).hexdigest()
        pin["sha256_source"] = "hashed: a stand-in file this test wrote"
    return data


def _run(
    payload: Path, tmp_path: Path, releases: Path
) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    bin_dir, log, root = tmp_path / "bin", tmp_path / "calls.log", tmp_path / "root"
    bin_dir.mkdir()
    root.mkdir()
    for name, body in TOOLS.items():
        stub = bin_dir / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{log}"\n{body}\n')
        stub.chmod(0o755)
    runtime = root / "usr/bin/nvidia-container-runtime"
    runtime.parent.mkdir(parents=True)
    runtime.write_text("#!/bin/sh\n")
    runtime.chmod(0o755)
    done = subprocess.run(
        ["bash", str(payload / "scripts" / "72-kubernetes.sh")],
        env={
            "PATH": f"{bin_dir}:{base_path(tmp_path / 'base-bin')}",
            "GPUFORGE_ROOT": str(root),
            "FAKE_RELEASES": str(releases),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else [], root


def _payload(tmp_path: Path, data: dict[str, Any]) -> Path:
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    return render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload


def test_the_step_runs_after_the_container_toolkit_and_before_gpuforge_installs_its_units() -> None:
    assert (
        STEPS.index("70-container-toolkit.sh")
        < STEPS.index("72-kubernetes.sh")
        < STEPS.index("85-gpuforge.sh")
    )
    text = (SCRIPTS / "72-kubernetes.sh").read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text


def test_every_part_is_checked_then_installed_and_the_kubelet_enabled_not_started(tmp_path: Path) -> None:
    data = _releases(tmp_path / "releases", load_matrix_data())
    done, calls, root = _run(_payload(tmp_path, data), tmp_path, tmp_path / "releases")
    assert done.returncode == 0, done.stderr
    downloads = len(KUBERNETES_KEYS)
    assert [call.split()[0] for call in calls][:downloads] == ["curl"] * downloads  # every download first
    assert calls[downloads:] == ["systemctl daemon-reload", "systemctl enable kubelet.service"]
    for path in (
        "usr/local/bin/kubelet",
        "usr/local/bin/containerd",
        "usr/local/sbin/runc",
        "opt/cni/bin/loopback",
        "usr/local/bin/aws-iam-authenticator",
    ):
        assert (root / path).stat().st_mode & 0o111, path
    assert (root / "etc/containerd/config.toml").read_text() == (FILES / "containerd-config.toml").read_text()
    units = root / "etc/systemd/system"
    assert (units / "kubelet.service.d/gpuforge.conf").read_text() == (
        FILES / "kubelet-gpuforge.conf"
    ).read_text()
    assert (units / "kubelet.service").is_file() and (units / "containerd.service").is_file()
    assert (
        "kubelet 1.35.8, containerd 2.3.4, runc 1.4.3, CNI plugins 1.9.1, aws-iam-authenticator 0.7.12, "
        "ecr-credential-provider 1.37.0 for control plane 1.35" in done.stderr
    )


@pytest.mark.parametrize("key", KUBERNETES_KEYS)
def test_a_checksum_mismatch_stops_the_step_before_anything_is_installed(tmp_path: Path, key: str) -> None:
    data = _releases(tmp_path / "releases", load_matrix_data())
    wrong = "0" * 64
    data["kubernetes"][key]["sha256"] = wrong
    done, calls, root = _run(_payload(tmp_path, data), tmp_path, tmp_path / "releases")
    assert done.returncode == 1
    assert f"the matrix pins {wrong}; refusing to run it" in done.stderr
    assert all(call.startswith("curl ") for call in calls)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "usr/bin/nvidia-container-runtime"
    ]


def test_a_matrix_without_kubernetes_skips_the_step(tmp_path: Path) -> None:
    data = load_matrix_data()
    del data["kubernetes"]
    done, calls, root = _run(_payload(tmp_path, data), tmp_path, tmp_path)
    assert (done.returncode, calls) == (0, [])
    assert "the matrix pins no Kubernetes node parts; skipping" in done.stderr
    assert not (root / "etc").exists()


def test_the_step_needs_the_nvidia_runtime_it_configures(tmp_path: Path) -> None:
    data = _releases(tmp_path / "releases", load_matrix_data())
    payload = _payload(tmp_path, data)
    (tmp_path / "root").mkdir()
    done = subprocess.run(
        ["bash", str(payload / "scripts" / "72-kubernetes.sh")],
        env={"PATH": base_path(tmp_path / "base-bin"), "GPUFORGE_ROOT": str(tmp_path / "root")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and "nvidia-container-runtime is missing" in done.stderr


def test_containerd_runs_pods_with_the_nvidia_runtime_by_default() -> None:
    config = tomllib.loads((FILES / "containerd-config.toml").read_text())
    assert config["version"] == 3  # containerd 2.x's format
    cri = config["plugins"]["io.containerd.cri.v1.runtime"]
    runtimes = cri["containerd"]["runtimes"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    # The toolkit's runtime (nvidia-container-toolkit-base ships it at /usr/bin) and the pinned runc.
    assert runtimes["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime",
        "SystemdCgroup": True,
    }
    assert runtimes["runc"]["options"] == {"BinaryName": "/usr/local/sbin/runc", "SystemdCgroup": True}
    assert cri["cni"]["bin_dirs"] == ["/opt/cni/bin"]


def test_the_kubelet_gate_is_slurmds_gate() -> None:
    """The same ordering, requirement and marker test as slurmd's drop-in, line for line."""

    def gate(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]

    assert gate(FILES / "kubelet-gpuforge.conf") == gate(SLURMD_GATE)
    unit = read_unit(FILES / "kubelet.service")
    assert unit["Unit"]["Requires"] == "containerd.service"
    assert unit["Service"]["ExecStart"].startswith(
        "/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet/config.yaml"
    )
    assert "ConditionPathExists=/etc/kubernetes/kubelet/kubeconfig" in (FILES / "kubelet.service").read_text()
    assert "[Install]" not in (FILES / "containerd.service").read_text()  # started by the kubelet only


def _boot_root(root: Path, gate_text: str) -> Path:
    """systemd's units, the kubelet's and containerd's units, the gate, the check's unit, Ubuntu-shaped cloud-init."""
    if shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze and systemd's own units are needed to verify the gate")
    shutil.copytree(Path("/usr/lib/systemd/system"), root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    (etc / "kubelet.service.d").mkdir(parents=True)
    for name in ("kubelet.service", "containerd.service"):
        shutil.copy(FILES / name, etc / name)
    shutil.copy(CHECK_UNIT, etc / CHECK_UNIT.name)
    (etc / "kubelet.service.d/gpuforge.conf").write_text(gate_text)
    (etc / "cloud-init.target").write_text("[Unit]\nDescription=stand-in\nAfter=multi-user.target\n")
    (etc / "cloud-final.service").write_text(
        "[Unit]\nDescription=stand-in\nAfter=multi-user.target\n[Service]\nType=oneshot\nExecStart=/bin/kill\n"
    )
    for target, unit in [
        ("multi-user.target", "kubelet.service"),
        ("multi-user.target", "cloud-init.target"),
        ("cloud-init.target", "cloud-final.service"),
        ("cloud-init.target", CHECK_UNIT.name),
    ]:
        wants = etc / f"{target}.wants"
        wants.mkdir(exist_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    for executable in (
        "usr/local/bin/kubelet",
        "usr/local/bin/containerd",
        "usr/local/bin/gpuforge",
        "usr/bin/test",
        "bin/kill",
        "sbin/modprobe",
    ):
        path = root / executable
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


def _verify(root: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    return subprocess.run(
        [
            analyze,
            "verify",
            "--man=no",
            f"--root={root}",
            "multi-user.target",
            "/etc/systemd/system/kubelet.service",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_systemd_accepts_the_gated_kubelet_without_an_ordering_cycle(tmp_path: Path) -> None:
    gate = (FILES / "kubelet-gpuforge.conf").read_text()
    good = _verify(_boot_root(tmp_path / "good", gate))
    assert (good.returncode, good.stderr) == (0, "")
    # Without DefaultDependencies=no systemd finds the cycle (the check waits for cloud-final, which runs after
    # multi-user.target, which wants the kubelet): the same verdict notices it, so the clean one above counts.
    bad = _verify(_boot_root(tmp_path / "bad", gate.replace("DefaultDependencies=no\n", "")))
    assert "Found ordering cycle" in bad.stderr and "deleted to break ordering cycle" in bad.stderr


PERIODIC = ("gpuforge-kubernetes-check.service", "gpuforge-kubernetes-check.timer")


def test_the_periodic_check_units_are_installed_not_enabled(tmp_path: Path) -> None:
    """Installed by the step and enabled by nobody here: the EKS join user data enables the timer."""
    data = _releases(tmp_path / "releases", load_matrix_data())
    done, calls, root = _run(_payload(tmp_path, data), tmp_path, tmp_path / "releases")
    assert done.returncode == 0, done.stderr
    for name in PERIODIC:
        assert (root / "etc/systemd/system" / name).read_text() == (FILES / name).read_text()
        assert not any(name in call for call in calls), calls


def test_the_periodic_check_drains_the_node_the_kubelet_registered(tmp_path: Path) -> None:
    """The service's command, run by a real sh: --kubernetes --report-asg and the kubelet's node name (the
    kernel hostname, lowercased), then the env file's flags split as the Slurm wrapper splits them."""
    unit = read_unit(FILES / PERIODIC[0])
    assert unit["Unit"]["Requisite"] == "kubelet.service"
    assert "kubelet.service" in unit["Unit"]["After"].split()
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[:2] == ["/bin/sh", "-c"]
    hostname = tmp_path / "hostname"
    hostname.write_text("IP-10-0-1-23.EC2.Internal\n")
    stand_in = tmp_path / "gpuforge"
    stand_in.write_text('#!/bin/sh\nfor arg in "$@"; do echo "$arg"; done\n')
    stand_in.chmod(0o755)
    # systemd turns $$ into $ before sh runs the line; the test points the two absolute paths at its files.
    script = (
        argv[2]
        .replace("$$", "$")
        .replace("/usr/local/bin/gpuforge", str(stand_in))
        .replace("/proc/sys/kernel/hostname", str(hostname))
    )
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"PATH": "/usr/bin:/bin", "GPUFORGE_NODE_CHECK_ARGS": "--report-asg --require-fsx"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "node",
        "check",
        "--kubernetes",
        "--report-asg",
        "--node-name",
        "ip-10-0-1-23.ec2.internal",
        "--json",
        "--report-dir",
        "/var/log/gpuforge",
        "--report-asg",
        "--require-fsx",
    ]


def test_systemd_accepts_the_periodic_check_after_the_kubelet(tmp_path: Path) -> None:
    root = _boot_root(tmp_path / "root", (FILES / "kubelet-gpuforge.conf").read_text())
    etc = root / "etc/systemd/system"
    for name in PERIODIC:
        shutil.copy(FILES / name, etc / name)
    for executable in ("bin/sh",):
        path = root / executable
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    done = subprocess.run(
        [
            analyze,
            "verify",
            "--man=no",
            f"--root={root}",
            *(f"/etc/systemd/system/{name}" for name in PERIODIC),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    # The same verdict fails a unit systemd cannot run, so the clean one above counts.
    (etc / PERIODIC[0]).write_text((FILES / PERIODIC[0]).read_text().replace("Type=oneshot", "Type=oneshoot"))
    bad = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", f"/etc/systemd/system/{PERIODIC[0]}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "oneshoot" in bad.stderr


# --- pulling from private ECR: the kubelet's credential provider ----------------------------------------

CREDENTIAL_CONFIG = FILES / "ecr-credential-provider.yaml"


def _kubelet_flags() -> dict[str, str]:
    argv = shlex.split(read_unit(FILES / "kubelet.service")["Service"]["ExecStart"])
    return dict(
        arg.removeprefix("--").split("=", 1) for arg in argv[1:] if arg.startswith("--") and "=" in arg
    )


def test_the_kubelet_runs_the_installed_credential_provider_with_its_config(tmp_path: Path) -> None:
    """Both flags (given the config without the folder the kubelet fails at start), pointing where the step put the binary
    (sha256-checked like every part) and the CredentialProviderConfig; the binary's name is the provider's."""
    flags = _kubelet_flags()
    config_path, bin_dir = (
        flags["image-credential-provider-config"],
        flags["image-credential-provider-bin-dir"],
    )
    data = _releases(tmp_path / "releases", load_matrix_data())
    done, _, root = _run(_payload(tmp_path, data), tmp_path, tmp_path / "releases")
    assert done.returncode == 0, done.stderr
    assert (root / config_path.lstrip("/")).read_text() == CREDENTIAL_CONFIG.read_text()
    [provider] = yaml.safe_load(CREDENTIAL_CONFIG.read_text())["providers"]
    binary = root / bin_dir.lstrip("/") / provider["name"]
    assert binary.read_text() == "#!/bin/sh\necho ecr-credential-provider\n" and binary.stat().st_mode & 0o111
    assert sorted(p.name for p in binary.parent.iterdir()) == [
        provider["name"]
    ]  # the kubelet's plugin folder only


def test_the_credential_provider_config_has_the_kubelets_shape() -> None:
    """kubelet.config.k8s.io/v1 CredentialProviderConfig (k8s.io/kubelet v0.35.8 config/v1/types.go): name,
    matchImages, defaultCacheDuration (a Go duration) and the exec API version are required; nothing else."""
    config = yaml.safe_load(CREDENTIAL_CONFIG.read_text())
    assert (config["apiVersion"], config["kind"]) == ("kubelet.config.k8s.io/v1", "CredentialProviderConfig")
    [provider] = config["providers"]
    assert set(provider) == {"name", "matchImages", "defaultCacheDuration", "apiVersion"}
    assert provider["name"] == "ecr-credential-provider"
    assert provider["apiVersion"] == "credentialprovider.kubelet.k8s.io/v1"
    assert re.fullmatch(r"([0-9]+(h|m|s))+", provider["defaultCacheDuration"])
    text = CREDENTIAL_CONFIG.read_text()
    for field in ("apiVersion", "kind", "name", "matchImages", "defaultCacheDuration"):
        assert re.search(rf"^\s*#.*\b{field}\b", text, re.MULTILINE), f"no comment gives {field}'s reason"


def _kubelet_match(pattern: str, image: str) -> bool:
    """The kubelet's matchImages test (kubernetes v1.35.8 pkg/credentialprovider/keyring.go, URLsMatch): the
    same port, the pattern's path a prefix of the image's, the same number of host labels, each matched by a
    shell glob (one glob never spans a dot)."""
    glob, target = urlsplit(f"https://{pattern}"), urlsplit(f"https://{image}")
    glob_host, target_host = (glob.hostname or "").split("."), (target.hostname or "").split(".")
    return (
        glob.port == target.port
        and target.path.startswith(glob.path)
        and len(glob_host) == len(target_host)
        and all(fnmatch.fnmatchcase(name, part) for part, name in zip(glob_host, target_host, strict=True))
    )


def _matched(image: str) -> bool:
    [provider] = yaml.safe_load(CREDENTIAL_CONFIG.read_text())["providers"]
    return any(_kubelet_match(pattern, image) for pattern in provider["matchImages"])


def _ecr_registries() -> list[str]:
    """A private ECR registry in every region gpuforge accepts (gpuforge.regions, botocore's partitions): the
    documented form <account>.dkr.ecr.<region>.<the partition's DNS suffix>."""
    resolver = EndpointResolver(create_loader().load_data("endpoints"))
    return [
        f"123456789012.dkr.ecr.{region}.{resolver.get_partition_dns_suffix(resolver.get_partition_for_region(region))}"
        for region in sorted(aws_regions())
    ]


def test_the_credential_provider_serves_ecr_in_every_region_gpuforge_accepts() -> None:
    registries = _ecr_registries()
    assert len(registries) == len(aws_regions()) > 30
    assert [r for r in registries if not _matched(f"{r}/team/trainer:1.0")] == []
    # The EKS add-ons every node pulls (aws-node, kube-proxy, the EFA device plugin), and the FIPS endpoints.
    assert _matched("602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.20.4-eksbuild.1")
    assert _matched("602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy:v1.35.0-minimal-eksbuild.2")
    assert _matched("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/team/trainer:1.0")


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
        "registry.k8s.io/pause:3.10.1",
        "public.ecr.aws/eks-distro/kubernetes/pause:v1.35.0-eks-1-35-6",
        "docker.io/library/busybox:1.37",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com.example.org/amazon-k8s-cni:v1",
        "dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1",
    ],
)
def test_the_credential_provider_is_not_run_for_other_registries(image: str) -> None:
    assert not _matched(image)


def test_the_matcher_is_the_kubelets() -> None:
    """The matcher above, on the examples the kubelet's own doc comment gives, so a pass above counts."""
    assert _kubelet_match("*.k8s.io", "registry.k8s.io/pause")
    assert not _kubelet_match("*.io", "registry.k8s.io/pause")
    assert _kubelet_match("registry.io:8080/path", "registry.io:8080/path/image")
    assert not _kubelet_match("registry.io:8080/path", "registry.io/path/image")


# --- the sandbox (pause) image, pinned by digest -------------------------------------------------------


def test_containerd_pins_the_sandbox_image_by_digest() -> None:
    """containerd 2.x's pinned sandbox image (io.containerd.cri.v1.images pinned_images.sandbox, whose default
    is registry.k8s.io/pause by tag); the kubelet has no --pod-infra-container-image in 1.35."""
    images = tomllib.loads((FILES / "containerd-config.toml").read_text())["plugins"][
        "io.containerd.cri.v1.images"
    ]
    sandbox = images["pinned_images"]["sandbox"]
    assert re.fullmatch(r"registry\.k8s\.io/pause:3\.10\.1@sha256:[0-9a-f]{64}", sandbox)
    assert "pod-infra-container-image" not in read_unit(FILES / "kubelet.service")["Service"]["ExecStart"]
