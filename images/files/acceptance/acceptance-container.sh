#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR source-path=SCRIPTDIR/../../scripts disable=SC2153 # lib.sh: beside it in the build context, images/scripts in the repository; GPUFORGE_* come from matrix.env
# The acceptance container's build steps, one per argument (the Dockerfile `gpuforge image acceptance-container`
# renders runs them in order). Every value is the matrix's, from matrix.env, which gpuforge writes as it does for
# the AMI; the helpers are the AMI's lib.sh: each download checked against its sha256 (download_checked), each
# package at the version its pin names from the intended repository (install_pinned). nccl-tests are built by the
# AMI's own step, 55-nccl-tests.sh. Where a step differs from the AMI's, the reason is beside it: a container has
# no kernel and no driver of its own (the node's, through the NVIDIA container runtime and the EFA device plugin)
# and no systemd.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

readonly MPI_HOME=/opt/amazon/openmpi
readonly EFA_LIB=/opt/amazon/efa/lib
readonly LD_CONF=/etc/ld.so.conf.d/000-gpuforge-acceptance.conf
readonly MPIRUN=/usr/local/bin/mpirun

step_packages() {
    apt_update
    # From the OS's archive, as the AMI's steps take them: curl for the downloads, a compiler for nccl-tests
    # (and a separate aws-ofi-nccl), OpenSSH for the MPI launcher and its workers.
    apt-get install "${APT_OPTIONS[@]}" --no-install-recommends \
        ca-certificates curl build-essential openssh-server openssh-client
}

step_nccl() {
    # The base image carries and holds NCCL at its own version; the matrix's replaces it, from the NVIDIA
    # repository the base image is set up with, as the AMI's 40-cuda.sh installs it.
    local package
    for package in libnccl2 libnccl-dev; do
        if [[ -n "$(installed_version "$package")" ]]; then
            apt-mark unhold "$package" >/dev/null
        fi
    done
    install_pinned "$GPUFORGE_NCCL" "$NVIDIA_CUDA_HOST" libnccl2 libnccl-dev
}

step_efa() {
    local work plugin_dir
    work="$(mktemp -d)"
    # The AMI's download (lib.sh, as 50-efa.sh), checked against the matrix's sha256 before it runs.
    efa_installer_unpacked "$work"
    # In a container, as AWS's nccl-tests image installs it (aws-samples/awsome-distributed-training,
    # micro-benchmarks/nccl-tests/nccl-tests.Dockerfile at commit 0162aacd5da07d424e13f44bef8dd2c4cfcc66e4): the
    # base's verbs packages removed for the installer's own rdma-core, and no kernel module (the node's), no
    # limits file and no device check (no EFA device exists while the image builds). That image also passes
    # -g and -d, which are left out here.
    apt-get remove "${APT_OPTIONS[@]}" --allow-change-held-packages \
        ibverbs-utils libibverbs-dev libibverbs1 libmlx5-1
    (cd "$work/aws-efa-installer" && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify)
    efa_installer_recorded

    # aws-ofi-nccl: the installer's bundled plugin, or a separate build, exactly as 50-efa.sh does (lib.sh).
    ofi_built_if_separate "$work"
    plugin_dir="$(ofi_plugin_dir)"
    # The plugin first, as on the AMI; then Open MPI's and libfabric's libraries, which on a node a login shell
    # would add: a container's processes (a Job's all_reduce_perf, the ranks sshd starts) get no login shell.
    printf '%s\n' "$plugin_dir" "$MPI_HOME/lib" "$EFA_LIB" >"$LD_CONF"
    ldconfig
    if [[ -n "$GPUFORGE_OFI_NET_PLUGIN" ]]; then
        echo "NCCL_NET_PLUGIN=$GPUFORGE_OFI_NET_PLUGIN" >/etc/nccl.conf
    fi
    rm -rf "$work"
    log "aws-ofi-nccl: NCCL loads $(ld_path "$GPUFORGE_OFI_LIBRARY")"
}

step_dcgm() {
    # dcgmi only, the client: the diag runs in the node's nv-hostengine (the AMI's 75-dcgm.sh installs and enables
    # it there), which the diag pod reaches on the host's network. Its package is DCGM's core at the matrix's pin.
    install_pinned "$GPUFORGE_DCGM" "$NVIDIA_CUDA_HOST" "$(pkg_dcgm)"
}

step_ssh() {
    # The privilege-separation folder sshd needs, which systemd would create on a host.
    mkdir -p /run/sshd
    # Host keys (openssh-server's install normally makes them): every worker of this image shares them, and the
    # launcher checks none (ssh-gpuforge-acceptance.conf): the pods exist for one run on the cluster's network.
    ssh-keygen -A
    # The launcher pod runs `mpirun` (gpuforge.validate.kubernetes_mpi): Open MPI's, with --prefix, so that the
    # daemons it starts over ssh on the workers find Open MPI without a login shell's environment (Open MPI's
    # mpirun(1), "Remote Execution").
    printf '#!/bin/sh\nexec %s/bin/mpirun --prefix %s "$@"\n' "$MPI_HOME" "$MPI_HOME" >"$MPIRUN"
    chmod 0755 "$MPIRUN"
    /usr/sbin/sshd -t
}

# sshd's effective value of a setting (sshd -T prints every setting lower-cased, one a line).
sshd_setting() { /usr/sbin/sshd -T | awk -v key="$1" '$1 == key { print $2; exit }'; }

step_verify() {
    local -a problems=()
    local package version tool missing
    [[ "${CUDA_VERSION:-}" == "$GPUFORGE_CUDA" ]] ||
        problems+=("cuda: the base image carries CUDA '${CUDA_VERSION:-}', the matrix pins $GPUFORGE_CUDA")
    for package in libnccl2 libnccl-dev; do
        version="$(installed_version "$package")"
        version_matches "$GPUFORGE_NCCL" "$version" ||
            problems+=("nccl: $package is '$version', the matrix pins $GPUFORGE_NCCL")
    done
    version="$(installed_version "$(pkg_dcgm)")"
    version_matches "$GPUFORGE_DCGM" "$version" ||
        problems+=("dcgm: $(pkg_dcgm) is '$version', the matrix pins $GPUFORGE_DCGM")
    grep -qx "# EFA installer version: $GPUFORGE_EFA_INSTALLER" "$(efa_installed_file)" ||
        problems+=("efa_installer: $(efa_installed_file) does not record $GPUFORGE_EFA_INSTALLER")
    [[ -n "$(ld_path "$GPUFORGE_OFI_LIBRARY")" ]] ||
        problems+=("aws_ofi_nccl: $GPUFORGE_OFI_LIBRARY is not in the linker cache")
    for tool in all_reduce_perf mpirun dcgmi; do
        command -v "$tool" >/dev/null || problems+=("$tool is not on PATH")
    done
    # Every library all_reduce_perf loads resolves, but the driver's, which the NVIDIA container runtime mounts
    # from the node when a pod starts.
    missing="$(ldd "$(command -v all_reduce_perf)" | awk '/not found/ && $1 !~ /^lib(cuda|nvidia-ml)\.so/ { print $1 }')"
    [[ -z "$missing" ]] || problems+=("all_reduce_perf: libraries not found: ${missing//$'\n'/ }")
    [[ "$(sshd_setting passwordauthentication)" == no ]] || problems+=("sshd accepts passwords")
    [[ "$(sshd_setting kbdinteractiveauthentication)" == no ]] || problems+=("sshd accepts keyboard-interactive")
    [[ "$(sshd_setting pubkeyauthentication)" == yes ]] || problems+=("sshd refuses keys")
    if ((${#problems[@]})); then
        die "the acceptance container does not match matrix $GPUFORGE_MATRIX_NAME: $(printf '%s; ' "${problems[@]}")"
    fi
    log "acceptance container of $GPUFORGE_MATRIX_NAME $GPUFORGE_MATRIX_VERSION verified"
}

case "${1:-}" in
packages | nccl | efa | dcgm | ssh | verify) "step_$1" ;;
*) die "usage: $0 packages|nccl|efa|dcgm|ssh|verify (one build step of the acceptance container)" ;;
esac
