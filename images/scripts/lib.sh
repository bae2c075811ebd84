# shellcheck shell=bash
# shellcheck disable=SC2034 # a library: its variables are used by the scripts that source it
# Shared by gpuforge's provisioning and verification scripts; sourced, never run.
#
# Every version comes from ../matrix.env, which gpuforge writes from the checked matrix.
# Package names are derived here once, so the install steps and the verification step
# can never disagree about which package holds which component.
#
# GPUFORGE_ROOT (empty on a real build) prefixes the files the kernel step and the
# verification step read and write, so tests can run both against a scratch root.

GPUFORGE_PAYLOAD="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="${GPUFORGE_ROOT:-}"
GPUFORGE_STATE="$ROOT/var/lib/gpuforge"
PINNED_LIST="$GPUFORGE_STATE/pinned-packages"

# Repository hosts, used to pick a package version from the intended origin only.
NVIDIA_CUDA_HOST="developer.download.nvidia.com"
NVIDIA_TOOLKIT_HOST="nvidia.github.io"
FSX_HOST="fsx-lustre-client-repo.s3.amazonaws.com"

export DEBIAN_FRONTEND=noninteractive
APT_OPTIONS=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

log() { printf '==> gpuforge: %s\n' "$*" >&2; }
die() {
    printf 'gpuforge: error: %s\n' "$*" >&2
    exit 1
}

load_matrix() {
    # shellcheck source=/dev/null
    source "$GPUFORGE_PAYLOAD/matrix.env"
}

# --- names derived from the matrix --------------------------------------------------------

cuda_series() { # 12.9.1 -> 12-9
    local major_minor="${GPUFORGE_CUDA%.*}"
    echo "${major_minor//./-}"
}
cuda_major() { echo "${GPUFORGE_CUDA%%.*}"; }
driver_branch() { echo "${GPUFORGE_DRIVER%%.*}"; }

pkg_driver() {
    if [[ "$GPUFORGE_KERNEL_MODULES" == open ]]; then
        echo "nvidia-driver-$(driver_branch)-open"
    else
        echo "nvidia-driver-$(driver_branch)"
    fi
}
pkg_fabricmanager() { echo "nvidia-fabricmanager-$(driver_branch)"; }
pkg_nscq() { echo "libnvidia-nscq-$(driver_branch)"; }
# Never `cuda` or `cuda-X-Y`: those pull in cuda-drivers, which replaces the pinned driver.
pkg_cuda() { echo "cuda-toolkit-$(cuda_series)"; }
pkg_cudnn() {
    local major="${GPUFORGE_CUDNN%%.*}"
    if ((major >= 9)); then echo "libcudnn${major}-cuda-$(cuda_major)"; else echo "libcudnn${major}"; fi
}
pkg_cudnn_dev() {
    local major="${GPUFORGE_CUDNN%%.*}"
    if ((major >= 9)); then echo "libcudnn${major}-dev-cuda-$(cuda_major)"; else echo "libcudnn${major}-dev"; fi
}
pkg_lustre() { echo "lustre-client-modules-$GPUFORGE_KERNEL"; }
pkg_dcgm() {
    local major="${GPUFORGE_DCGM%%.*}"
    if ((major >= 4)); then echo "datacenter-gpu-manager-${major}-core"; else echo "datacenter-gpu-manager"; fi
}
# dcgm-exporter versions read <dcgm>-<exporter>; its host package carries the exporter part.
dcgm_exporter_version() { echo "${GPUFORGE_DCGM_EXPORTER#*-}"; }
efa_installed_file() { echo "$ROOT/opt/amazon/efa_installed_packages"; }
manifest_file() { echo "$ROOT/etc/gpuforge/manifest.json"; }

# --- versions -------------------------------------------------------------------------------

# A package version matches a pin when, without its epoch, it is the pin or the pin followed
# by a Debian revision: 1:4.2.3-1 matches 4.2.3, 2.15.6-1fsx25 matches 2.15.6.
version_matches() {
    local pin="$1" actual="${2#*:}"
    [[ "$actual" == "$pin" || "$actual" == "$pin"-* ]]
}

# The installed version of a package, or nothing when it is not installed.
installed_version() {
    local status
    status="$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$1" 2>/dev/null)" || return 0
    if [[ "$status" == "ii "* ]]; then
        echo "${status##* }"
    fi
}

# --- apt ------------------------------------------------------------------------------------

apt_update() {
    local attempt
    for attempt in 1 2 3; do
        if apt-get update -q; then return 0; fi
        log "apt-get update failed (attempt $attempt of 3)"
        sleep 10
    done
    die "apt-get update failed three times; check the builder's network and the repositories above"
}

# The one version of PACKAGE from ORIGIN that matches PIN; fails when there is none or several.
apt_resolve() {
    local package="$1" pin="$2" origin="$3" version url
    local -a matches=()
    while IFS='|' read -r _ version url; do
        version="${version// /}"
        if [[ "$url" == *"$origin"* ]] && version_matches "$pin" "$version"; then
            matches+=("$version")
        fi
    done < <(apt-cache madison "$package" 2>/dev/null)
    mapfile -t matches < <(printf '%s\n' "${matches[@]}" | sed '/^$/d' | sort -u)
    if ((${#matches[@]} == 0)); then
        return 1
    fi
    if ((${#matches[@]} > 1)); then
        die "$package: pin $pin matches several versions from $origin (${matches[*]}); pin the full package version in the matrix"
    fi
    echo "${matches[0]}"
}

# Install every PACKAGE at the version matching PIN from ORIGIN, then hold it.
install_pinned() {
    local pin="$1" origin="$2" package version
    shift 2
    local -a wanted=()
    for package in "$@"; do
        version="$(apt_resolve "$package" "$pin" "$origin")" ||
            die "$package: no version matching $pin in the repository at $origin (apt-cache madison $package)"
        wanted+=("$package=$version")
    done
    log "installing ${wanted[*]}"
    apt-get install "${APT_OPTIONS[@]}" --no-install-recommends --allow-downgrades "${wanted[@]}"
    hold "$@"
}

# Hold packages now and remember them, so the system step can re-check every hold at the end.
hold() {
    mkdir -p "$GPUFORGE_STATE"
    apt-mark hold "$@" >/dev/null
    printf '%s\n' "$@" >>"$PINNED_LIST"
}

# Add an apt repository whose signing keys must all be among FINGERPRINTS (space-separated). Every
# primary key in the downloaded file is checked, not only the first: apt trusts each key in the
# keyring. With no fingerprint (the vendor publishes none), the file must hold exactly one key,
# which is then trusted from the HTTPS download. Each trusted key is logged and recorded in
# $GPUFORGE_STATE/trusted-keys (repository, fingerprint, key URL).
add_apt_repository() {
    local name="$1" key_url="$2" fingerprints="$3" line="$4" keyring download fpr
    local -a primary
    keyring="/usr/share/keyrings/gpuforge-$name.gpg"
    download="$(mktemp)"
    curl -fsSL --retry 3 -o "$download" "$key_url"
    # A primary key's fingerprint is the fpr record right after its pub record (subkeys follow sub).
    mapfile -t primary < <(gpg --show-keys --with-colons "$download" |
        awk -F: '$1 == "pub" { want = 1; next } $1 == "fpr" && want { print $10 } { want = 0 }')
    ((${#primary[@]})) || die "$name: $key_url holds no OpenPGP public key"
    if [[ -z "$fingerprints" ]]; then
        ((${#primary[@]} == 1)) ||
            die "$name: $key_url holds ${#primary[@]} keys (${primary[*]}); with no published fingerprint to check them against, only a file of one key is trusted"
        log "$name: signing key ${primary[0]} (no fingerprint published: trusted from the HTTPS download)"
    else
        for fpr in "${primary[@]}"; do
            [[ " $fingerprints " == *" $fpr "* ]] ||
                die "$name: the signing key at $key_url has fingerprint $fpr, expected $fingerprints"
        done
        log "$name: signing key ${primary[*]}"
    fi
    mkdir -p "$GPUFORGE_STATE" "$ROOT/usr/share/keyrings" "$ROOT/etc/apt/sources.list.d"
    for fpr in "${primary[@]}"; do
        printf '%s %s %s\n' "$name" "$fpr" "$key_url" >>"$GPUFORGE_STATE/trusted-keys"
    done
    gpg --dearmor --yes -o "$ROOT$keyring" "$download"
    rm -f "$download"
    echo "deb [signed-by=$keyring] $line" >"$ROOT/etc/apt/sources.list.d/gpuforge-$name.list"
}

# Download URL to DEST and stop unless its sha256 is EXPECTED.
download_checked() {
    local url="$1" expected="$2" dest="$3" found
    curl -fsSL --retry 3 -o "$dest" "$url"
    found="$(sha256sum "$dest" | awk '{ print $1 }')"
    if [[ "$found" != "$expected" ]]; then
        die "$url: sha256 is $found, the matrix pins $expected; refusing to run it"
    fi
}

# --- EFA and aws-ofi-nccl: the AMI (50-efa.sh) and the acceptance container install them alike ---

# The matrix's EFA installer, checked against its sha256, unpacked into WORK/aws-efa-installer.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html (installer URL and -y).
efa_installer_unpacked() {
    local work="$1"
    download_checked "https://efa-installer.amazonaws.com/aws-efa-installer-$GPUFORGE_EFA_INSTALLER.tar.gz" \
        "$GPUFORGE_EFA_SHA256" "$work/efa.tar.gz"
    tar -xzf "$work/efa.tar.gz" -C "$work"
}

# Stop unless the installer recorded the matrix's version.
efa_installer_recorded() {
    grep -qx "# EFA installer version: $GPUFORGE_EFA_INSTALLER" "$(efa_installed_file)" ||
        die "efa_installer: $(efa_installed_file) does not record installer $GPUFORGE_EFA_INSTALLER"
}

# aws-ofi-nccl built from the matrix's tarball (sha256 checked) into its prefix when the matrix installs it
# separately; the installer's bundled plugin otherwise. The caller provides the compiler.
ofi_built_if_separate() {
    local work="$1"
    [[ "$GPUFORGE_OFI_INSTALL" == separate ]] || return 0
    download_checked "$GPUFORGE_OFI_TARBALL_URL" "$GPUFORGE_OFI_SHA256" "$work/ofi.tar.gz"
    mkdir "$work/ofi"
    tar -xzf "$work/ofi.tar.gz" -C "$work/ofi" --strip-components=1
    (
        cd "$work/ofi" || die "aws_ofi_nccl: cannot enter $work/ofi"
        ./configure --prefix="$GPUFORGE_OFI_PREFIX" --with-libfabric=/opt/amazon/efa \
            --with-cuda="/usr/local/cuda-${GPUFORGE_CUDA%.*}"
        make -j "$(nproc)"
        make install
    )
}

# The folder holding the aws-ofi-nccl plugin library; stop when the install left none.
ofi_plugin_dir() {
    local dir
    for dir in "$GPUFORGE_OFI_PREFIX/lib/x86_64-linux-gnu" "$GPUFORGE_OFI_PREFIX/lib"; do
        if [[ -e "$dir/$GPUFORGE_OFI_LIBRARY" ]]; then
            echo "$dir"
            return 0
        fi
    done
    die "aws_ofi_nccl: no $GPUFORGE_OFI_LIBRARY under $GPUFORGE_OFI_PREFIX after the $GPUFORGE_OFI_INSTALL install"
}

# --- the node ---------------------------------------------------------------------------------

require_kernel() {
    local running
    running="$(uname -r)"
    [[ "$running" == "$GPUFORGE_KERNEL" ]] ||
        die "kernel: running $running, the matrix pins $GPUFORGE_KERNEL (the reboot into the pinned kernel did not take)"
}

# A field of a kernel module built for the pinned kernel, or nothing.
module_field() {
    { modinfo -k "$GPUFORGE_KERNEL" -F "$2" "$1" 2>/dev/null || true; } | head -n 1
}

# NVLink 5 (HGX B200/B300). NVLSM reaches the NVSwitch management ports as InfiniBand devices, so
# NVIDIA's own driver container starts Fabric Manager on these boards only once mlx5_core and ib_umad
# are loaded, installs nvlsm beside it, and starts both with `nvidia-fabricmanager-start.sh --mode
# start ... --nvlsm-config-file ...`, which runs NVLSM before nv-fabricmanager (Fabric Manager's own
# systemd unit uses the same script). Source: NVIDIA/gpu-driver-container@06a208ca ubuntu22.04/
# nvidia-driver (_assert_nvlink5_system, _ensure_nvlink5_prerequisites, the NVLink5+ start) and
# ubuntu22.04/install.sh (nvlink5_pkgs_install); NVIDIA Fabric Manager user guide, "What is NVLink
# Subnet Manager?" and the HGX B200/B100 section.
NVLINK5_MODULES=(mlx5_core ib_umad)
nvlink5_modules_file() { echo "$ROOT/etc/modules-load.d/gpuforge-nvlink5.conf"; }
fabricmanager_dropin() { echo "$ROOT/etc/systemd/system/nvidia-fabricmanager.service.d/gpuforge-nvlink5.conf"; }

# Load the NVLink 5 modules at every boot, before Fabric Manager (and so NVLSM) starts.
write_nvlink5_prerequisites() {
    local modules dropin
    modules="$(nvlink5_modules_file)"
    dropin="$(fabricmanager_dropin)"
    mkdir -p "$(dirname "$modules")" "$(dirname "$dropin")"
    {
        echo "# gpuforge: NVLSM reaches the NVSwitch management ports through these (NVLink 5)."
        printf '%s\n' "${NVLINK5_MODULES[@]}"
    } >"$modules"
    cat >"$dropin" <<'UNIT'
# gpuforge: Fabric Manager starts NVLSM, which needs mlx5_core and ib_umad (modules-load.d) loaded first.
[Unit]
Wants=systemd-modules-load.service
After=systemd-modules-load.service
UNIT
}

# One line per unmet NVLink 5 prerequisite (none: all met), for the verify step.
nvlink5_problems() {
    local module modules
    modules="$(nvlink5_modules_file)"
    for module in "${NVLINK5_MODULES[@]}"; do
        modinfo -k "$GPUFORGE_KERNEL" -F name "$module" >/dev/null 2>&1 ||
            echo "kernel module $module is not available for $GPUFORGE_KERNEL (install the kernel's modules-extra package)"
        grep -qx "$module" "$modules" 2>/dev/null || echo "$module is not loaded at boot: it is missing from $modules"
    done
    grep -qx "After=systemd-modules-load.service" "$(fabricmanager_dropin)" 2>/dev/null ||
        echo "nvidia-fabricmanager.service is not ordered after systemd-modules-load.service ($(fabricmanager_dropin))"
}

# open or proprietary, from the nvidia module's licence: the open modules declare
# "Dual MIT/GPL" (NVIDIA/open-gpu-kernel-modules, kernel-open/nvidia/nv-frontend.c),
# the proprietary ones "NVIDIA".
module_flavour() {
    case "$(module_field nvidia license)" in
    "Dual MIT/GPL") echo open ;;
    NVIDIA) echo proprietary ;;
    *) echo unknown ;;
    esac
}

# The absolute path ld.so resolves LIBRARY to, from the linker cache.
ld_path() {
    { ldconfig -p 2>/dev/null || true; } | awk -v lib="$1" '$1 == lib { print $NF; exit }'
}

# --- monitoring (77-monitoring.sh, 90-verify.sh, images/files/gpuforge-*.service) -------------

MONITORING_DAEMONS=(node_exporter prometheus alertmanager)
declare -A MONITORING_BINARIES=([node_exporter]="node_exporter" [prometheus]="prometheus promtool"
    [alertmanager]="alertmanager amtool")
declare -A MONITORING_USERS=([node_exporter]="node-exporter" [prometheus]="prometheus"
    [alertmanager]="alertmanager")
# The controller's user data writes prometheus.yml, prometheus.flags, alertmanager.yml and rules/ here
# (what `gpuforge monitoring render --out` writes); gpuforge-prometheus.service and
# gpuforge-alertmanager.service start only where those files exist.
MONITORING_CONFIG_DIR="/etc/gpuforge/monitoring"
DCGM_FIELDS_FILE="/etc/gpuforge/dcgm-exporter-fields.csv"
monitoring_prefix() { echo "/opt/gpuforge/$1-$2"; }

# --- Kubernetes node parts (72-kubernetes.sh, 90-verify.sh, images/files/kubernetes/) -----------

# The matrix's kubernetes.* downloads, in install order (gpuforge.images.matrix.KUBERNETES_KEYS).
KUBERNETES_PARTS=(kubelet containerd runc cni_plugins aws_iam_authenticator ecr_credential_provider)
KUBELET_BIN="/usr/local/bin/kubelet"
# The kubelet's credential plugin, where the join configuration's kubeconfig runs it
# (gpuforge.components.eks_join.AUTHENTICATOR).
AUTHENTICATOR_BIN="/usr/local/bin/aws-iam-authenticator"
# The kubelet's image credential provider (cloud-provider-aws's ecr-credential-provider) and its
# CredentialProviderConfig, where kubelet.service's --image-credential-provider-bin-dir and
# --image-credential-provider-config name them.
CREDENTIAL_PROVIDER_BIN_DIR="/usr/local/libexec/kubelet-credential-providers"
CREDENTIAL_PROVIDER_CONFIG="/etc/kubernetes/image-credential-provider.yaml"
CONTAINERD_BIN="/usr/local/bin/containerd"
RUNC_BIN="/usr/local/sbin/runc"
CNI_BIN_DIR="/opt/cni/bin"
CONTAINERD_CONFIG="/etc/containerd/config.toml"

# --- the Amazon RDS CA bundle (45-slurm.sh, 90-verify.sh, images/files/rds-ca/) ----------------------

# slurmdbd verifies an Aurora writer's certificate with it (accounting.database: aurora). matrix.env
# carries where the payload holds it, its installed path (gpuforge.scheduler.render.RDS_CA_BUNDLE) and
# its sha256 (gpuforge.images.rds_ca.BUNDLE_SHA256).
sha256_of() { sha256sum "$1" | awk '{ print $1 }'; }

# Install the payload's bundle at GPUFORGE_RDS_CA_BUNDLE; stop unless its sha256 is the pinned one.
install_rds_ca_bundle() {
    local bundle="$GPUFORGE_PAYLOAD/$GPUFORGE_RDS_CA_SOURCE" found
    [[ -f "$bundle" ]] || die "rds-ca: the payload has no $GPUFORGE_RDS_CA_SOURCE (gpuforge copies it from images/files/rds-ca/)"
    found="$(sha256_of "$bundle")"
    [[ "$found" == "$GPUFORGE_RDS_CA_SHA256" ]] ||
        die "rds-ca: $bundle has sha256 $found, gpuforge pins $GPUFORGE_RDS_CA_SHA256; refusing to install it"
    install -D -m 0644 "$bundle" "$ROOT$GPUFORGE_RDS_CA_BUNDLE"
    log "rds-ca: installed the Amazon RDS CA bundle at $GPUFORGE_RDS_CA_BUNDLE (sha256 $found)"
}
