"""The provisioning scripts: shellcheck-clean, strict, and the shared library's names and version rules.

The library functions run in real bash, sourced from a real render (so they
read the matrix.env gpuforge wrote). `apt-cache madison` output is replayed,
because the packages live in NVIDIA's and AWS's repositories, not on this
machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from image_helpers import MATRICES, REPO, base_path, load_matrix_data, write_matrix

from gpuforge.images.matrix import load_valid
from gpuforge.images.render import STEPS, RenderOptions, render

SCRIPTS = REPO / "images" / "scripts"


def test_shellcheck_passes_on_every_script(shellcheck: str) -> None:
    files = sorted(str(path) for path in SCRIPTS.glob("*.sh"))
    done = subprocess.run([shellcheck, *files], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_step_exists_and_runs_strict() -> None:
    for step in STEPS:
        text = (SCRIPTS / step).read_text()
        assert text.startswith("#!/usr/bin/env bash\n"), step
        assert "\nset -euo pipefail\n" in text, step


def test_cuda_is_installed_from_the_toolkit_package_never_the_driver_pulling_metapackages() -> None:
    cuda_step = (SCRIPTS / "40-cuda.sh").read_text()
    assert '"$(pkg_cuda)"' in cuda_step
    metapackage = re.compile(r"(^|[\s\"'])(cuda|cuda-\d+-\d+|cuda-drivers(-\d+)?)([\s\"'=]|$)")
    for script in SCRIPTS.glob("*.sh"):
        for line in script.read_text().splitlines():
            if "install_pinned" in line or "apt-get install" in line:
                assert not metapackage.search(line), f"{script.name}: {line}"


def test_the_efa_installer_is_checked_before_it_runs() -> None:
    text = (SCRIPTS / "50-efa.sh").read_text()
    assert text.index('efa_installer_unpacked "$work"') < text.index("efa_installer.sh -y")


@pytest.fixture(scope="module")
def payloads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    rendered = {}
    for name in ("p5-h100-cuda12", "p4d-a100-cuda12", "p6-b200-cuda12", "p5-h100-cuda13"):
        matrix, digest = load_valid(MATRICES / f"{name}.yaml")
        out = tmp_path_factory.mktemp(name) / "out"
        rendered[name] = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), out).payload
    return rendered


def _bash(payload: Path, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    program = f'source "{payload}/scripts/lib.sh"; load_matrix; {script}'
    return subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": base_path(payload.parent / "base-bin"), **(env or {})},
        check=False,
    )


def test_an_efa_installer_that_is_not_the_pinned_one_is_refused_before_it_is_unpacked(
    payloads: dict[str, Path], tmp_path: Path
) -> None:
    """lib.sh's efa_installer_unpacked (the AMI's and the acceptance container's one download) stops on a tarball
    whose sha256 is not the matrix's, before tar sees it. curl is a stand-in writing other bytes."""
    work = tmp_path / "work"
    work.mkdir()
    fake_curl = (
        'curl() { while [ "$#" -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done; echo other >"$out"; }'
    )
    done = _bash(payloads["p5-h100-cuda12"], f'{fake_curl}; efa_installer_unpacked "{work}"')
    assert done.returncode != 0
    assert "aws-efa-installer-" in done.stderr and "refusing to run it" in done.stderr
    assert sorted(path.name for path in work.iterdir()) == ["efa.tar.gz"]  # nothing unpacked


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [
        (
            "p5-h100-cuda12",
            "nvidia-driver-580-open cuda-toolkit-12-9 libcudnn9-cuda-12 libcudnn9-dev-cuda-12 "
            "lustre-client-modules-6.8.0-1015-aws datacenter-gpu-manager-4-core 4.7.1 nvidia-fabricmanager-580",
        ),
        (
            "p4d-a100-cuda12",
            "nvidia-driver-580 cuda-toolkit-12-4 libcudnn9-cuda-12 libcudnn9-dev-cuda-12 "
            "lustre-client-modules-6.8.0-1015-aws datacenter-gpu-manager-4-core 4.7.1 nvidia-fabricmanager-580",
        ),
        (
            "p5-h100-cuda13",
            "nvidia-driver-580-open cuda-toolkit-13-0 libcudnn9-cuda-13 libcudnn9-dev-cuda-13 "
            "lustre-client-modules-6.8.0-1015-aws datacenter-gpu-manager-4-core 4.7.1 nvidia-fabricmanager-580",
        ),
    ],
)
def test_package_names_follow_the_matrix(payloads: dict[str, Path], matrix: str, expected: str) -> None:
    done = _bash(
        payloads[matrix],
        "echo $(pkg_driver) $(pkg_cuda) $(pkg_cudnn) $(pkg_cudnn_dev) $(pkg_lustre) $(pkg_dcgm) "
        "$(dcgm_exporter_version) $(pkg_fabricmanager)",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_nvlsm_is_pinned_only_where_the_matrix_pins_it(payloads: dict[str, Path]) -> None:
    assert _bash(payloads["p6-b200-cuda12"], 'echo "$GPUFORGE_NVLSM"').stdout.strip() == "2025.10.11-1"
    assert _bash(payloads["p5-h100-cuda12"], 'echo "[$GPUFORGE_NVLSM]"').stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("pin", "actual", "matches"),
    [
        ("580.95.05", "580.95.05-0ubuntu1", True),
        ("4.2.3", "1:4.2.3-1", True),
        ("2.15.6", "2.15.6-1fsx25", True),
        ("2.27.3-1+cuda12.9", "2.27.3-1+cuda12.9", True),
        ("580.95.05", "580.95.050-1", False),
        ("12.9.1", "12.9.10-1", False),
        ("2.27.3-1+cuda12.9", "2.27.3-1+cuda12.8", False),
        ("9.10.2.21", "", False),
    ],
)
def test_version_matching_allows_only_a_revision_after_the_pin(
    payloads: dict[str, Path], pin: str, actual: str, matches: bool
) -> None:
    done = _bash(payloads["p5-h100-cuda12"], f"version_matches '{pin}' '{actual}'")
    assert (done.returncode == 0) == matches


MADISON = """nvidia-driver-580-open | 580.95.05-0ubuntu1 | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages
nvidia-driver-580-open | 580.82.07-0ubuntu1 | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages
nvidia-driver-580-open | 580.95.05-0ubuntu0.22.04.1 | http://us-east-1.ec2.archive.ubuntu.com/ubuntu jammy-updates/restricted amd64 Packages
"""


def _with_madison(tmp_path: Path, output: str) -> dict[str, str]:
    """apt-cache replaced by a replay of `apt-cache madison`: the repositories are not on this machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "madison.txt").write_text(output)
    stub = bin_dir / "apt-cache"
    stub.write_text(f'#!/usr/bin/env bash\n[[ "$1" == madison ]] && cat "{tmp_path}/madison.txt"\n')
    stub.chmod(0o755)
    return {"PATH": f"{bin_dir}:{base_path(tmp_path / 'base-bin')}"}


def test_apt_resolve_picks_the_one_version_from_the_intended_repository(
    payloads: dict[str, Path], tmp_path: Path
) -> None:
    env = _with_madison(tmp_path, MADISON)
    done = _bash(
        payloads["p5-h100-cuda12"], 'apt_resolve nvidia-driver-580-open 580.95.05 "$NVIDIA_CUDA_HOST"', env
    )
    assert (done.returncode, done.stdout.strip()) == (0, "580.95.05-0ubuntu1")
    # Canonical's build of the same driver also matches the pin, so without the origin it is ambiguous.
    ambiguous = _bash(payloads["p5-h100-cuda12"], "apt_resolve nvidia-driver-580-open 580.95.05 http", env)
    assert ambiguous.returncode == 1
    assert "matches several versions" in ambiguous.stderr
    missing = _bash(
        payloads["p5-h100-cuda12"], 'apt_resolve nvidia-driver-580-open 580.65.06 "$NVIDIA_CUDA_HOST"', env
    )
    assert (missing.returncode, missing.stdout) == (1, "")


CUDA_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"
TOOLKIT_KEY = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
# Stand-ins for the tools the kernel step drives. The step installs packages and rewrites apt and
# GRUB configuration, which a test must not do to the machine it runs on; every call is logged.
KERNEL_STEP_TOOLS = {
    "apt-get": "exit 0",
    "apt-mark": "exit 0",
    "update-grub": "exit 0",
    "dpkg-query": "exit 1",
    "curl": 'while [[ $# -gt 1 ]]; do if [[ $1 == -o ]]; then out=$2; fi; shift; done; echo "key from $1" >"$out"',
    "gpg": (
        'if [[ " $* " == *" --show-keys "* ]]; then key="$(cat "${@: -1}")"; '
        'case "$key" in *3bf863cc*) fpr="$CUDA_FPR" ;; *libnvidia-container*) fpr=' + TOOLKIT_KEY + " ;; "
        "*) fpr=0000000000000000000000000000000000000000 ;; esac; "
        'echo "pub:-:4096:1:0000000000000000:1650000000:::-:::scSC::::::23::0:"; '
        'echo "fpr:::::::::$fpr:"; else while [[ $# -gt 0 ]]; do [[ $1 == -o ]] && : >"$2"; shift; done; fi'
    ),
    "apt-cache": 'if [[ $1 == madison && -f "$MADISON/$2" ]]; then cat "$MADISON/$2"; fi; exit 0',
}


def _kernel_step(
    payload: Path, tmp_path: Path, lustre_versions: list[str], cuda_fpr: str = CUDA_KEY
) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    root, bin_dir, madison = tmp_path / "root", tmp_path / "bin", tmp_path / "madison"
    for folder in (root / "etc", bin_dir, madison):
        folder.mkdir(parents=True)
    (root / "etc" / "os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n')
    log = tmp_path / "calls.log"
    for name, body in KERNEL_STEP_TOOLS.items():
        stub = bin_dir / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{log}"\n{body}\n')
        stub.chmod(0o755)
    package = "lustre-client-modules-6.8.0-1015-aws"
    (madison / package).write_text(
        "".join(
            f"{package} | {version} | https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu jammy/main amd64 Packages\n"
            for version in lustre_versions
        )
    )
    env = {
        "PATH": f"{bin_dir}:{base_path(tmp_path / 'base-bin')}",
        "GPUFORGE_ROOT": str(root),
        "MADISON": str(madison),
        "CUDA_FPR": cuda_fpr,
    }
    done = subprocess.run(
        ["bash", str(payload / "scripts" / "10-kernel.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done, root, calls


def test_kernel_step_pins_the_kernel_and_boots_it_next(payloads: dict[str, Path], tmp_path: Path) -> None:
    done, root, calls = _kernel_step(payloads["p5-h100-cuda12"], tmp_path, ["2.15.6-1fsx25"])
    assert done.returncode == 0, done.stderr
    kernel = "6.8.0-1015-aws"
    installs = [call for call in calls if call.startswith("apt-get install")]
    assert any(
        f"linux-image-{kernel} linux-modules-{kernel} linux-headers-{kernel}" in call for call in installs
    )
    assert f"apt-mark hold linux-image-{kernel} linux-modules-{kernel} linux-headers-{kernel}" in calls
    grub = (root / "etc" / "default" / "grub.d" / "99-gpuforge-kernel.cfg").read_text()
    assert grub == f'GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux {kernel}"\n'
    assert calls[-1] == "update-grub "
    sources = {p.name: p.read_text() for p in (root / "etc" / "apt" / "sources.list.d").iterdir()}
    assert "compute/cuda/repos/ubuntu2204/x86_64/ /" in sources["gpuforge-cuda.list"]
    assert "fsx-lustre-client-repo.s3.amazonaws.com/ubuntu jammy main" in sources["gpuforge-fsx-lustre.list"]
    assert all("[signed-by=/usr/share/keyrings/gpuforge-" in line for line in sources.values())


def test_kernel_step_stops_before_any_change_when_fsx_has_no_lustre_for_the_kernel(
    payloads: dict[str, Path], tmp_path: Path
) -> None:
    done, root, calls = _kernel_step(payloads["p5-h100-cuda12"], tmp_path, ["2.15.5-1fsx20"])
    assert done.returncode == 1
    assert (
        "lustre_client: FSx publishes no lustre-client-modules-6.8.0-1015-aws at Lustre 2.15.6" in done.stderr
    )
    assert not [call for call in calls if "linux-image" in call or call.startswith("update-grub")]
    assert not (root / "etc" / "default" / "grub.d").exists()


def test_kernel_step_refuses_a_repository_key_with_another_fingerprint(
    payloads: dict[str, Path], tmp_path: Path
) -> None:
    done, _, calls = _kernel_step(payloads["p5-h100-cuda12"], tmp_path, ["2.15.6-1fsx25"], cuda_fpr="F" * 40)
    assert done.returncode == 1
    assert (
        f"cuda: the signing key at https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub has fingerprint {'F' * 40}, expected {CUDA_KEY}"
        in done.stderr
    )
    assert not [call for call in calls if "linux-image" in call]


# --- repository keys, against real gpg ---------------------------------------------------------


@pytest.fixture(scope="module")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Armored key files made by real gpg (in a throwaway GNUPGHOME): one key, and two keys in one file."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    fingerprints = []
    for name in ("vendor", "intruder"):
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--quick-gen-key",
                f"{name} <{name}@example.invalid>",
                "ed25519",
                "sign",
                "never",
            ],
            env=env,
            capture_output=True,
            check=True,
            timeout=30,
        )
        listing = subprocess.run(
            ["gpg", "--with-colons", "--fingerprint", f"{name}@example.invalid"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        fingerprints.append(
            next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        )
    files = {}
    for label, who in (
        ("one", ["vendor@example.invalid"]),
        ("two", ["vendor@example.invalid", "intruder@example.invalid"]),
    ):
        path = home.parent / f"{label}.asc"
        armored = subprocess.run(
            ["gpg", "--armor", "--export", *who], env=env, capture_output=True, check=True, timeout=30
        )
        path.write_bytes(armored.stdout)
        files[label] = (path, fingerprints[: len(who)])
    return files


def _add_repository(
    payload: Path, tmp_path: Path, key: Path, fingerprints: str
) -> subprocess.CompletedProcess[str]:
    """lib.sh's add_apt_repository with curl replaced by a copy of KEY (real gpg reads it)."""
    bin_dir, root = tmp_path / "bin", tmp_path / "root"
    bin_dir.mkdir()
    root.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(
        f'#!/usr/bin/env bash\nwhile [[ $# -gt 1 ]]; do [[ $1 == -o ]] && cp "{key}" "$2"; shift; done\n'
    )
    curl.chmod(0o755)
    gpg = bin_dir / "gpg"
    gpg.symlink_to("/usr/bin/gpg")
    env = {
        "PATH": f"{bin_dir}:{base_path(tmp_path / 'base-bin')}",
        "GPUFORGE_ROOT": str(root),
        "GNUPGHOME": str(tmp_path / "empty-gnupg"),
    }
    (tmp_path / "empty-gnupg").mkdir(mode=0o700)
    return _bash(
        payload,
        f'add_apt_repository vendor https://vendor.example.invalid/key.asc "{fingerprints}" "https://vendor.example.invalid/apt /"',
        env,
    )


def test_a_key_file_with_the_expected_key_is_trusted_and_recorded(
    payloads: dict[str, Path], tmp_path: Path, key_files: dict[str, tuple[Path, list[str]]]
) -> None:
    key, [fingerprint] = key_files["one"]
    done = _add_repository(payloads["p5-h100-cuda12"], tmp_path, key, fingerprint)
    assert done.returncode == 0, done.stderr
    root = tmp_path / "root"
    assert (root / "usr/share/keyrings/gpuforge-vendor.gpg").stat().st_size > 0
    assert (
        root / "var/lib/gpuforge/trusted-keys"
    ).read_text() == f"vendor {fingerprint} https://vendor.example.invalid/key.asc\n"


def test_a_second_key_hidden_behind_the_expected_one_is_refused(
    payloads: dict[str, Path], tmp_path: Path, key_files: dict[str, tuple[Path, list[str]]]
) -> None:
    key, [vendor, intruder] = key_files["two"]
    done = _add_repository(payloads["p5-h100-cuda12"], tmp_path, key, vendor)
    assert done.returncode == 1
    assert (
        f"vendor: the signing key at https://vendor.example.invalid/key.asc has fingerprint {intruder}, expected {vendor}"
        in done.stderr
    )
    assert not (tmp_path / "root/usr/share/keyrings/gpuforge-vendor.gpg").exists()


def test_with_no_published_fingerprint_only_a_file_of_one_key_is_trusted(
    payloads: dict[str, Path], tmp_path: Path, key_files: dict[str, tuple[Path, list[str]]]
) -> None:
    one, [fingerprint] = key_files["one"]
    first = tmp_path / "one"
    first.mkdir()
    done = _add_repository(payloads["p5-h100-cuda12"], first, one, "")
    assert done.returncode == 0, done.stderr
    assert (
        f"vendor: signing key {fingerprint} (no fingerprint published: trusted from the HTTPS download)"
        in done.stderr
    )
    two, fingerprints = key_files["two"]
    second = tmp_path / "two"
    second.mkdir()
    refused = _add_repository(payloads["p5-h100-cuda12"], second, two, "")
    assert refused.returncode == 1
    assert f"holds 2 keys ({' '.join(fingerprints)}); with no published fingerprint" in refused.stderr


# --- the Slurm step -----------------------------------------------------------------------------

# Stand-ins for what the Slurm step drives: it installs packages, builds and writes under /usr, /opt
# and /etc, which a test must not do to the machine it runs on. curl writes a fixed body, so its
# sha256 is known; every call is logged.
SLURM_STEP_TOOLS = {
    "apt-get": "exit 0",
    "curl": 'while [[ $# -gt 1 ]]; do if [[ $1 == -o ]]; then out=$2; fi; shift; done; echo "tarball from $1" >"$out"',
    "useradd": "exit 0",
    "systemctl": "exit 0",
    "ldconfig": "exit 0",
}


def _slurm_step(payload: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, body in SLURM_STEP_TOOLS.items():
        stub = bin_dir / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{log}"\n{body}\n')
        stub.chmod(0o755)
    done = subprocess.run(
        ["bash", str(payload / "scripts" / "45-slurm.sh")],
        env={"PATH": f"{bin_dir}:{base_path(tmp_path / 'base-bin')}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def test_slurm_step_is_skipped_cleanly_when_the_matrix_has_no_slurm(tmp_path: Path) -> None:
    data = load_matrix_data()
    del data["slurm"], data["pmix"], data["mariadb"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    done, calls = _slurm_step(payload, tmp_path)
    assert (done.returncode, calls) == (0, [])
    assert "the matrix pins no Slurm; skipping" in done.stderr


def test_slurm_step_stops_on_a_checksum_mismatch_before_installing_anything(
    payloads: dict[str, Path], tmp_path: Path
) -> None:
    done, calls = _slurm_step(payloads["p5-h100-cuda12"], tmp_path)
    assert done.returncode == 1
    matrix, _ = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    assert matrix.pmix is not None
    assert (
        f"{matrix.pmix.url}: sha256 is " in done.stderr
        and f"the matrix pins {matrix.pmix.sha256}" in done.stderr
    )
    assert [call.split()[0] for call in calls] == ["curl"]  # no apt-get, no build, no user


def test_slurm_step_checks_both_tarballs_before_it_builds_and_leaves_the_units_disabled() -> None:
    text = (SCRIPTS / "45-slurm.sh").read_text()
    checks = [text.index('"$GPUFORGE_PMIX_SHA256"'), text.index('"$GPUFORGE_SLURM_SHA256"')]
    assert max(checks) < text.index("apt-get install") < text.index("./configure")
    assert '--with-pmix="$GPUFORGE_PMIX_PREFIX"' in text and '--with-nvml="$GPUFORGE_CUDA_HOME"' in text
    assert "--sysconfdir=/etc/slurm" in text
    assert "etc/slurmctld.service etc/slurmdbd.service etc/slurmd.service" in text
    assert "systemctl enable" not in text
