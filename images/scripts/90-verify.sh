#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2153 # GPUFORGE_* values come from matrix.env
# The last build step: read back what is really installed, compare it with the matrix, and write
# /etc/gpuforge/manifest.json for the node agent. Every difference is reported with the component
# it concerns, and any difference fails the build before the manifest is written.
#
# A builder usually has no GPU and no EFA device, so this reads what was built for the pinned
# kernel (modinfo) and installed (dpkg, the linker cache, the EFA installer's record). The loaded
# driver is compared too when the builder has one; otherwise the node agent checks it at boot.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix
PATH="/opt/amazon/efa/bin:$PATH"

failures=()
declare -A found=()

fail() { failures+=("$1: $2"); }

# Compare an installed package with a pin; report it under COMPONENT when it differs.
check_package() {
    local component="$1" pin="$2" package="$3" version
    version="$(installed_version "$package")"
    if [[ -z "$version" ]]; then
        fail "$component" "package $package is not installed (the matrix pins $pin)"
        return 1
    fi
    if ! version_matches "$pin" "$version"; then
        fail "$component" "package $package is $version, the matrix pins $pin"
        return 1
    fi
}

check_enabled() {
    local component="$1" unit="$2" state
    state="$(systemctl is-enabled "$unit" 2>/dev/null || true)"
    [[ "$state" == enabled ]] || fail "$component" "$unit is '${state:-not installed}', it must be enabled"
}

check_kernel() {
    local running
    running="$(uname -r)"
    if [[ "$running" == "$GPUFORGE_KERNEL" ]]; then
        found[kernel]="$running"
    else
        fail kernel "running $running, the matrix pins $GPUFORGE_KERNEL"
    fi
}

check_driver() {
    local module flavour loaded ok=1
    module="$(module_field nvidia version)"
    if [[ -z "$module" ]]; then
        fail nvidia_driver "no nvidia module is built for kernel $GPUFORGE_KERNEL"
        ok=0
    elif [[ "$module" != "$GPUFORGE_DRIVER" ]]; then
        fail nvidia_driver "the nvidia module built for $GPUFORGE_KERNEL is $module, the matrix pins $GPUFORGE_DRIVER"
        ok=0
    fi
    check_package nvidia_driver "$GPUFORGE_DRIVER" "$(pkg_driver)" || ok=0
    local proc="$ROOT/proc/driver/nvidia/version"
    if [[ -r "$proc" ]]; then
        loaded="$(head -n 1 "$proc")"
        if [[ "$loaded" != *" $GPUFORGE_DRIVER "* ]]; then
            fail nvidia_driver "the loaded driver reports '$loaded', the matrix pins $GPUFORGE_DRIVER"
            ok=0
        fi
    fi
    if ((ok)); then found[nvidia_driver]="$GPUFORGE_DRIVER"; fi
    flavour="$(module_flavour)"
    if [[ "$flavour" == "$GPUFORGE_KERNEL_MODULES" ]]; then
        found[nvidia_kernel_modules]="$flavour"
    else
        fail nvidia_kernel_modules "the nvidia module built for $GPUFORGE_KERNEL is $flavour, the matrix pins $GPUFORGE_KERNEL_MODULES"
    fi
}

check_fabric() {
    if [[ -n "$GPUFORGE_FABRICMANAGER" ]]; then
        check_package fabricmanager "$GPUFORGE_FABRICMANAGER" "$(pkg_fabricmanager)" &&
            found[fabricmanager]="$GPUFORGE_FABRICMANAGER"
        if [[ "$GPUFORGE_NVSWITCH" == 1 ]]; then
            check_enabled fabricmanager nvidia-fabricmanager.service
        fi
    else
        found[fabricmanager]=none
    fi
    if [[ -n "$GPUFORGE_NSCQ" ]]; then
        check_package nscq "$GPUFORGE_NSCQ" "$(pkg_nscq)" || true
    fi
    if [[ -n "$GPUFORGE_NVLSM" ]]; then
        local problem
        check_package nvlsm "$GPUFORGE_NVLSM" nvlsm && found[nvlsm]="$GPUFORGE_NVLSM"
        while IFS= read -r problem; do
            fail nvlsm "$problem"
            unset 'found[nvlsm]'
        done < <(nvlink5_problems)
    fi
    check_enabled nvidia_driver nvidia-persistenced.service
}

check_cuda_stack() {
    check_package cuda "$GPUFORGE_CUDA" "$(pkg_cuda)" && found[cuda]="$GPUFORGE_CUDA"
    check_package cudnn "$GPUFORGE_CUDNN" "$(pkg_cudnn)" && found[cudnn]="$GPUFORGE_CUDNN"
    local ok=1 path real want="${GPUFORGE_NCCL%%-*}"
    check_package nccl "$GPUFORGE_NCCL" libnccl2 || ok=0
    path="$(ld_path libnccl.so.2)"
    if [[ -z "$path" ]]; then
        fail nccl "libnccl.so.2 is not in the linker cache"
        ok=0
    else
        real="$(readlink -f "$ROOT$path")" || real="$path"
        if [[ "${real##*/}" != "libnccl.so.$want" ]]; then
            fail nccl "NCCL loads ${real#"$ROOT"} (${real##*/}), the matrix pins NCCL $want"
            ok=0
        fi
    fi
    if ((ok)); then found[nccl]="$GPUFORGE_NCCL"; fi
}

check_efa() {
    local installer module libfabric
    installer="$(sed -n 's/^# EFA installer version: //p' "$(efa_installed_file)" 2>/dev/null | head -n 1)" || true
    if [[ "$installer" == "$GPUFORGE_EFA_INSTALLER" ]]; then
        found[efa_installer]="$installer"
    else
        fail efa_installer "the EFA installer record says '${installer:-nothing}', the matrix pins $GPUFORGE_EFA_INSTALLER"
    fi
    # Builds with GPUDirect support append "g" to the module version (modinfo efa: 2.17.3g).
    module="$(module_field efa version)"
    if [[ -z "$module" ]]; then
        fail efa_installer "no efa module is built for kernel $GPUFORGE_KERNEL"
    elif [[ -n "$GPUFORGE_EFA_DRIVER" && "${module%g}" != "$GPUFORGE_EFA_DRIVER" ]]; then
        fail efa_installer "the efa module built for $GPUFORGE_KERNEL is $module, installer $GPUFORGE_EFA_INSTALLER ships $GPUFORGE_EFA_DRIVER"
    fi
    libfabric="$(fi_info --version 2>/dev/null | awk '$1 == "libfabric:" { print $2; exit }')" || true
    if [[ "$libfabric" == "$GPUFORGE_LIBFABRIC" ]]; then
        found[libfabric]="$libfabric"
    else
        fail libfabric "fi_info reports libfabric '${libfabric:-nothing}', installer $GPUFORGE_EFA_INSTALLER ships $GPUFORGE_LIBFABRIC"
    fi
}

check_ofi() {
    local path version
    path="$(ld_path "$GPUFORGE_OFI_LIBRARY")"
    if [[ -z "$path" ]]; then
        fail aws_ofi_nccl "$GPUFORGE_OFI_LIBRARY is not in the linker cache, so NCCL cannot load it"
        return
    fi
    if [[ "$path" != "$GPUFORGE_OFI_PREFIX"/* ]]; then
        fail aws_ofi_nccl "NCCL loads $path, outside the pinned prefix $GPUFORGE_OFI_PREFIX"
        return
    fi
    # The plugin logs "Initializing aws-ofi-nccl <version>" and carries that string
    # (aws/aws-ofi-nccl src/nccl_ofi_net.cpp, PACKAGE_STRING from configure.ac AC_INIT).
    version="$(grep -a -o -m 1 'aws-ofi-nccl [0-9][0-9A-Za-z.+-]*' "$ROOT$path" 2>/dev/null | head -n 1)" || true
    version="${version#aws-ofi-nccl }"
    if ! version_matches "$GPUFORGE_OFI_VERSION" "$version"; then
        fail aws_ofi_nccl "NCCL loads $path, version '${version:-unknown}', the matrix pins $GPUFORGE_OFI_VERSION"
        return
    fi
    if [[ -n "$GPUFORGE_OFI_NET_PLUGIN" ]] &&
        ! grep -qx "NCCL_NET_PLUGIN=$GPUFORGE_OFI_NET_PLUGIN" "$ROOT/etc/nccl.conf" 2>/dev/null; then
        fail aws_ofi_nccl "/etc/nccl.conf does not select the plugin (NCCL_NET_PLUGIN=$GPUFORGE_OFI_NET_PLUGIN)"
        return
    fi
    found[aws_ofi_nccl]="$GPUFORGE_OFI_VERSION"
}

check_rest() {
    check_package lustre_client "$GPUFORGE_LUSTRE" "$(pkg_lustre)" && found[lustre_client]="$GPUFORGE_LUSTRE"
    check_package container_toolkit "$GPUFORGE_CONTAINER_TOOLKIT" nvidia-container-toolkit &&
        found[container_toolkit]="$GPUFORGE_CONTAINER_TOOLKIT"
    check_package dcgm "$GPUFORGE_DCGM" "$(pkg_dcgm)" && found[dcgm]="$GPUFORGE_DCGM"
    check_package dcgm_exporter "$(dcgm_exporter_version)" datacenter-gpu-manager-exporter || true
}

# nccl-tests, when the matrix pins it: the binaries the acceptance run starts are installed.
check_nccl_tests() {
    [[ -n "$GPUFORGE_NCCL_TESTS" ]] || return 0
    local binary ok=1
    for binary in all_reduce_perf all_gather_perf; do
        [[ -x "$ROOT/usr/local/bin/$binary" ]] || {
            fail nccl_tests "no /usr/local/bin/$binary (55-nccl-tests.sh builds it from nccl-tests $GPUFORGE_NCCL_TESTS)"
            ok=0
        }
    done
    ((ok)) && found[nccl_tests]="$GPUFORGE_NCCL_TESTS"
    return 0
}

# Slurm and PMIx, when the matrix pins them: the daemons report the pinned release, PMIx's installed
# header carries the pinned version, the plugins that --with-pmix and --with-nvml build are there,
# the units are installed but not enabled (the instance's user data enables one), and the slurm
# user and spool folders exist.
check_slurm() {
    [[ -n "$GPUFORGE_SLURM" ]] || return 0
    local reported header major minor release pmix plugin unit state ok=1
    reported="$(slurmd -V 2>/dev/null)" || true
    # slurmd -V prints "slurm <version>" (src/common/proc_args.c, print_slurm_version: PACKAGE_NAME, SLURM_VERSION_STRING).
    if [[ "$reported" == "slurm $GPUFORGE_SLURM" ]]; then
        found[slurm]="$GPUFORGE_SLURM"
    else
        fail slurm "slurmd -V reports '${reported:-nothing}', the matrix pins slurm $GPUFORGE_SLURM"
        ok=0
    fi
    # PMIx's pmix_version.h defines PMIX_VERSION_MAJOR/MINOR/RELEASE as e.g. "5L" (the header Slurm's
    # configure reads, SchedMD/slurm auxdir/x_ac_pmix.m4).
    header="$ROOT$GPUFORGE_PMIX_PREFIX/include/pmix_version.h"
    major="$(sed -n 's/^#define PMIX_VERSION_MAJOR \([0-9]*\)L$/\1/p' "$header" 2>/dev/null)" || true
    minor="$(sed -n 's/^#define PMIX_VERSION_MINOR \([0-9]*\)L$/\1/p' "$header" 2>/dev/null)" || true
    release="$(sed -n 's/^#define PMIX_VERSION_RELEASE \([0-9]*\)L$/\1/p' "$header" 2>/dev/null)" || true
    pmix="$major.$minor.$release"
    if [[ -z "$major" ]]; then
        fail pmix "no PMIx version in $GPUFORGE_PMIX_PREFIX/include/pmix_version.h (the matrix pins PMIx $GPUFORGE_PMIX)"
    elif [[ "$pmix" != "$GPUFORGE_PMIX" ]]; then
        fail pmix "the PMIx installed in $GPUFORGE_PMIX_PREFIX is $pmix, the matrix pins $GPUFORGE_PMIX"
    elif [[ ! -e "$ROOT$GPUFORGE_PMIX_PREFIX/lib/libpmix.so" ]]; then
        fail pmix "no libpmix.so in $GPUFORGE_PMIX_PREFIX/lib"
    else
        found[pmix]="$GPUFORGE_PMIX"
    fi
    # Slurm names its mpi/pmix plugin by PMIx major (mpi_pmix_v5.so), so this also checks it was
    # built against the pinned PMIx's major.
    for plugin in "mpi_pmix_v${GPUFORGE_PMIX%%.*}.so" gpu_nvml.so accounting_storage_mysql.so; do
        [[ -e "$ROOT/usr/lib/slurm/$plugin" ]] || {
            fail slurm "no Slurm plugin /usr/lib/slurm/$plugin (built by --with-pmix, --with-nvml and libmariadb-dev)"
            ok=0
        }
    done
    for unit in slurmctld.service slurmdbd.service slurmd.service mariadb.service gpuforge-sync-accounts.service; do
        state="$(systemctl is-enabled "$unit" 2>/dev/null || true)"
        [[ "$state" == disabled ]] || {
            fail slurm "$unit is '${state:-not installed}'; the image installs it disabled (user data enables it)"
            ok=0
        }
    done
    getent passwd slurm >/dev/null 2>&1 || fail slurm "there is no slurm user (SlurmUser of slurmctld)"
    for dir in /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm; do
        [[ -d "$ROOT$dir" ]] || fail slurm "folder $dir is missing"
    done
    # MariaDB for slurmdbd (the server for accounting.database: local, the client library its plugin loads).
    # The pin is apt's whole version, epoch included, so it is compared whole (check_package compares upstream pins).
    if [[ -n "$GPUFORGE_MARIADB" ]]; then
        local package version
        for package in mariadb-server libmariadb3; do
            version="$(installed_version "$package")"
            if [[ -z "$version" ]]; then
                fail mariadb "package $package is not installed (the matrix pins $GPUFORGE_MARIADB)"
            elif [[ "$version" != "$GPUFORGE_MARIADB" ]]; then
                fail mariadb "package $package is $version, the matrix pins $GPUFORGE_MARIADB"
            fi
        done
    fi
    # The Amazon RDS CA bundle slurmdbd verifies an Aurora writer with (45-slurm.sh: install_rds_ca_bundle).
    local bundle="$ROOT$GPUFORGE_RDS_CA_BUNDLE" digest
    if [[ ! -f "$bundle" ]]; then
        fail rds_ca "no $GPUFORGE_RDS_CA_BUNDLE (45-slurm.sh installs the Amazon RDS CA bundle there)"
    else
        digest="$(sha256_of "$bundle")"
        [[ "$digest" == "$GPUFORGE_RDS_CA_SHA256" ]] ||
            fail rds_ca "$GPUFORGE_RDS_CA_BUNDLE has sha256 $digest, gpuforge pins $GPUFORGE_RDS_CA_SHA256"
    fi
    if ((!ok)); then unset 'found[slurm]'; fi
}

# The monitoring daemons the matrix pins: each binary reports the pinned release, is linked where the
# units start it, and has its user; node_exporter's unit is enabled, the controller's two are installed
# and disabled (the controller's user data enables them); dcgm-exporter reads gpuforge's field list.
# They are not manifest components (gpuforge/node/manifest.py refuses keys it does not know); the AMI's
# tags record their versions (gpuforge:node-exporter, gpuforge:prometheus, gpuforge:alertmanager).
# Prometheus's builds print "<program>, version <version> (branch: ..., revision: ...)" first
# (prometheus/common version.Print, the --version of every Prometheus project binary).
check_monitoring() {
    local -A pins=([node_exporter]="$GPUFORGE_NODE_EXPORTER" [prometheus]="$GPUFORGE_PROMETHEUS"
        [alertmanager]="$GPUFORGE_ALERTMANAGER")
    local name binary prefix reported link unit state want ok
    [[ -s "$ROOT$DCGM_FIELDS_FILE" ]] || fail dcgm_exporter "no field list at $DCGM_FIELDS_FILE (77-monitoring.sh installs it)"
    grep -qx "ExecStart=/usr/bin/dcgm-exporter -f $DCGM_FIELDS_FILE" \
        "$ROOT/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuforge-fields.conf" 2>/dev/null ||
        fail dcgm_exporter "nvidia-dcgm-exporter.service is not pointed at $DCGM_FIELDS_FILE (drop-in gpuforge-fields.conf)"
    for name in "${MONITORING_DAEMONS[@]}"; do
        [[ -n "${pins[$name]}" ]] || continue
        prefix="$(monitoring_prefix "$name" "${pins[$name]}")"
        ok=1
        for binary in ${MONITORING_BINARIES[$name]}; do
            # Through PATH (/usr/local/bin first, as under sudo), then the link is checked to be the pinned one.
            reported="$("$binary" --version 2>&1 | head -n 1)" || true
            if [[ "$reported" != "$binary, version ${pins[$name]} "* ]]; then
                fail "$name" "$prefix/$binary --version reports '${reported:-nothing}', the matrix pins $name ${pins[$name]}"
                ok=0
            fi
            link="$(readlink "$ROOT/usr/local/bin/$binary" 2>/dev/null)" || true
            if [[ "$link" != "$prefix/$binary" ]]; then
                fail "$name" "/usr/local/bin/$binary points at '${link:-nothing}', not $prefix/$binary"
                ok=0
            fi
        done
        # The manifest records the version each binary reported and each link confirmed.
        if ((ok)); then found[$name]="${pins[$name]}"; fi
        getent passwd "${MONITORING_USERS[$name]}" >/dev/null 2>&1 ||
            fail "$name" "there is no ${MONITORING_USERS[$name]} user to run it"
        unit="gpuforge-${name//_/-}.service"
        want=disabled
        [[ "$name" == node_exporter ]] && want=enabled
        state="$(systemctl is-enabled "$unit" 2>/dev/null || true)"
        [[ "$state" == "$want" ]] || fail "$name" "$unit is '${state:-not installed}', the image installs it $want"
    done
    return 0
}

# The Kubernetes node parts the matrix pins (72-kubernetes.sh): each binary reports the pinned release,
# containerd's configuration makes NVIDIA's runtime the default, and the kubelet is enabled behind its boot
# gate but not running (it joins a cluster at boot, never at build). Like the monitoring daemons they are
# not manifest components; the AMI's tags record their versions (gpuforge:kubernetes.kubelet, ...).
# Output forms, read at each pinned release's source: `kubelet --version` prints "Kubernetes v<version>"
# (k8s.io/component-base version/verflag); `containerd --version` "containerd <module> v<version> <revision>"
# (containerd cmd/containerd/command/main.go); `runc --version` "runc version <version>" first (runc
# main.go); a CNI plugin run with no CNI_COMMAND "CNI <name> plugin v<version>" on stderr first
# (containernetworking/cni pkg/skel, the plugins' pkg/utils/buildversion, the tag set by their release build).
check_kubernetes() {
    [[ -n "$GPUFORGE_KUBERNETES_VERSION" ]] || return 0
    local reported state binary
    # Through PATH (as under sudo: /usr/local/sbin and /usr/local/bin first), each where 72-kubernetes.sh put it.
    # aws-iam-authenticator only by its presence: its sha256 was checked at install, and its version output
    # could not be read at its source (the Go module proxy does not serve sigs.k8s.io/aws-iam-authenticator).
    # The ECR credential provider likewise (sha256-checked at install), in the kubelet's provider folder.
    for binary in "$KUBELET_BIN" "$CONTAINERD_BIN" "$RUNC_BIN" "$AUTHENTICATOR_BIN" \
        "$CREDENTIAL_PROVIDER_BIN_DIR/ecr-credential-provider"; do
        [[ -x "$ROOT$binary" ]] || fail "$(basename "$binary")" "$binary is missing (72-kubernetes.sh installs it)"
    done
    reported="$(kubelet --version 2>&1)" || true
    [[ "$reported" == "Kubernetes v$GPUFORGE_KUBELET" ]] ||
        fail kubelet "$KUBELET_BIN --version reports '${reported:-nothing}', the matrix pins $GPUFORGE_KUBELET"
    reported="$(containerd --version 2>&1)" || true
    [[ " $reported " == *" v$GPUFORGE_CONTAINERD "* ]] ||
        fail containerd "$CONTAINERD_BIN --version reports '${reported:-nothing}', the matrix pins $GPUFORGE_CONTAINERD"
    reported="$(runc --version 2>&1 | head -n 1)" || true
    [[ "$reported" == "runc version $GPUFORGE_RUNC" ]] ||
        fail runc "$RUNC_BIN --version reports '${reported:-nothing}', the matrix pins $GPUFORGE_RUNC"
    reported="$("$ROOT$CNI_BIN_DIR/loopback" 2>&1 | head -n 1)" || true
    [[ "$reported" == "CNI loopback plugin v$GPUFORGE_CNI_PLUGINS" ]] ||
        fail cni_plugins "$CNI_BIN_DIR/loopback reports '${reported:-nothing}', the matrix pins $GPUFORGE_CNI_PLUGINS"
    grep -qx "  default_runtime_name = 'nvidia'" "$ROOT$CONTAINERD_CONFIG" 2>/dev/null ||
        fail containerd "$CONTAINERD_CONFIG does not make the NVIDIA runtime the default (72-kubernetes.sh installs it)"
    [[ -f "$ROOT/etc/systemd/system/kubelet.service.d/gpuforge.conf" ]] ||
        fail kubelet "the kubelet has no boot gate (kubelet.service.d/gpuforge.conf)"
    state="$(systemctl is-enabled kubelet.service 2>/dev/null || true)"
    [[ "$state" == enabled ]] || fail kubelet "kubelet.service is '${state:-not installed}', it must be enabled"
    state="$(systemctl is-active kubelet.service 2>/dev/null || true)"
    [[ "$state" != active ]] || fail kubelet "kubelet.service is running on the build instance; it must start only at a node's boot"
    # The periodic check's units: installed, left disabled (the EKS join's user data enables the timer).
    for unit in gpuforge-kubernetes-check.service gpuforge-kubernetes-check.timer; do
        state="$(systemctl is-enabled "$unit" 2>/dev/null || true)"
        [[ "$state" == disabled ]] ||
            fail kubelet "$unit is '${state:-not installed}'; the image installs it disabled (the EKS join enables it)"
    done
    return 0
}

check_holds() {
    local package
    [[ -r "$PINNED_LIST" ]] || {
        fail hold "no record of pinned packages at $PINNED_LIST"
        return
    }
    local held
    held="$(apt-mark showhold)"
    while read -r package; do
        grep -qx "$package" <<<"$held" || fail hold "$package is not held"
    done < <(sort -u "$PINNED_LIST")
}

json_string() {
    local text="${1//\\/\\\\}"
    printf '"%s"' "${text//\"/\\\"}"
}

write_manifest() {
    local target="$1" key first=1
    local -a keys=(kernel nvidia_driver nvidia_kernel_modules fabricmanager cuda cudnn nccl efa_installer
        libfabric aws_ofi_nccl lustre_client container_toolkit dcgm)
    [[ -n "${found[nvlsm]:-}" ]] && keys+=(nvlsm)
    [[ -n "${found[slurm]:-}" ]] && keys+=(slurm)
    [[ -n "${found[pmix]:-}" ]] && keys+=(pmix)
    [[ -n "${found[nccl_tests]:-}" ]] && keys+=(nccl_tests)
    for key in "${MONITORING_DAEMONS[@]}"; do
        if [[ -n "${found[$key]:-}" ]]; then keys+=("$key"); fi
    done
    {
        printf '{\n  "schema": 1,\n  "matrix": {\n'
        printf '    "name": %s,\n' "$(json_string "$GPUFORGE_MATRIX_NAME")"
        printf '    "version": %s,\n' "$(json_string "$GPUFORGE_MATRIX_VERSION")"
        printf '    "digest": %s\n  },\n  "targets": [' "$(json_string "$GPUFORGE_MATRIX_DIGEST")"
        for key in $GPUFORGE_TARGETS; do
            ((first)) || printf ', '
            first=0
            json_string "$key"
        done
        printf '],\n  "components": {\n'
        first=1
        for key in "${keys[@]}"; do
            ((first)) || printf ',\n'
            first=0
            printf '    %s: %s' "$(json_string "$key")" "$(json_string "${found[$key]}")"
        done
        printf '\n  }\n}\n'
    } >"$target"
}

check_kernel
check_driver
check_fabric
check_cuda_stack
check_efa
check_ofi
check_rest
check_slurm
check_nccl_tests
check_monitoring
check_kubernetes
check_holds

if ((${#failures[@]})); then
    for failure in "${failures[@]}"; do
        printf 'gpuforge: verify: %s\n' "$failure" >&2
    done
    die "image verification failed: ${#failures[@]} difference(s) between the image and matrix $GPUFORGE_MATRIX_NAME $GPUFORGE_MATRIX_VERSION"
fi

# The image's SBOM: every installed package, read with dpkg-query as the checks above read each
# pinned one (--showformat expands \t and \n: dpkg-query(1)). The build's last provisioner
# downloads it, and `image build` stores it beside the catalog record.
write_packages() {
    dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n' |
        awk -F '\t' '$1 ~ /^ii/ { print $2 "\t" $3 "\t" $4 }' >"$1"
}

manifest="$(manifest_file)"
mkdir -p "$(dirname "$manifest")"
write_manifest "$manifest.tmp"
mv -f "$manifest.tmp" "$manifest"
packages="$(dirname "$manifest")/packages.tsv"
write_packages "$packages.tmp"
mv -f "$packages.tmp" "$packages"
log "image matches matrix $GPUFORGE_MATRIX_NAME $GPUFORGE_MATRIX_VERSION; wrote $manifest"
