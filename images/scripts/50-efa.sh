#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Steps 5 and 6: the EFA installer, checked against the matrix's sha256 before it runs, then
# aws-ofi-nccl (the installer's bundled plugin, or a separate build at a pinned prefix), with
# NCCL pointed at it.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix
require_kernel

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html (installer URL and -y).
download_checked "https://efa-installer.amazonaws.com/aws-efa-installer-$GPUFORGE_EFA_INSTALLER.tar.gz" \
    "$GPUFORGE_EFA_SHA256" "$work/efa.tar.gz"
tar -xzf "$work/efa.tar.gz" -C "$work"
(cd "$work/aws-efa-installer" && ./efa_installer.sh -y)
grep -qx "# EFA installer version: $GPUFORGE_EFA_INSTALLER" "$(efa_installed_file)" ||
    die "efa_installer: $(efa_installed_file) does not record installer $GPUFORGE_EFA_INSTALLER"

if [[ "$GPUFORGE_OFI_INSTALL" == separate ]]; then
    apt-get install "${APT_OPTIONS[@]}" --no-install-recommends build-essential
    download_checked "$GPUFORGE_OFI_TARBALL_URL" "$GPUFORGE_OFI_SHA256" "$work/ofi.tar.gz"
    mkdir "$work/ofi"
    tar -xzf "$work/ofi.tar.gz" -C "$work/ofi" --strip-components=1
    (
        cd "$work/ofi"
        ./configure --prefix="$GPUFORGE_OFI_PREFIX" --with-libfabric=/opt/amazon/efa \
            --with-cuda="/usr/local/cuda-${GPUFORGE_CUDA%.*}"
        make -j "$(nproc)"
        make install
    )
fi

plugin_dir=""
for dir in "$GPUFORGE_OFI_PREFIX/lib/x86_64-linux-gnu" "$GPUFORGE_OFI_PREFIX/lib"; do
    if [[ -e "$dir/$GPUFORGE_OFI_LIBRARY" ]]; then
        plugin_dir="$dir"
        break
    fi
done
[[ -n "$plugin_dir" ]] ||
    die "aws_ofi_nccl: no $GPUFORGE_OFI_LIBRARY under $GPUFORGE_OFI_PREFIX after the $GPUFORGE_OFI_INSTALL install"

# NCCL dlopen()s its net plugin by name: put the plugin's folder in the linker cache, first.
echo "$plugin_dir" >/etc/ld.so.conf.d/000-gpuforge-aws-ofi-nccl.conf
ldconfig
if [[ -n "$GPUFORGE_OFI_NET_PLUGIN" ]]; then
    # /etc/nccl.conf holds NCCL_* settings NCCL reads at start
    # (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
    echo "NCCL_NET_PLUGIN=$GPUFORGE_OFI_NET_PLUGIN" >/etc/nccl.conf
fi
log "aws-ofi-nccl: NCCL loads $(ld_path "$GPUFORGE_OFI_LIBRARY")"
