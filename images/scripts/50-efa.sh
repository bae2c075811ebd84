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

efa_installer_unpacked "$work"
(cd "$work/aws-efa-installer" && ./efa_installer.sh -y)
efa_installer_recorded

if [[ "$GPUFORGE_OFI_INSTALL" == separate ]]; then
    apt-get install "${APT_OPTIONS[@]}" --no-install-recommends build-essential
fi
ofi_built_if_separate "$work"
plugin_dir="$(ofi_plugin_dir)"

# NCCL dlopen()s its net plugin by name: put the plugin's folder in the linker cache, first.
echo "$plugin_dir" >/etc/ld.so.conf.d/000-gpuforge-aws-ofi-nccl.conf
ldconfig
if [[ -n "$GPUFORGE_OFI_NET_PLUGIN" ]]; then
    # /etc/nccl.conf holds NCCL_* settings NCCL reads at start
    # (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
    echo "NCCL_NET_PLUGIN=$GPUFORGE_OFI_NET_PLUGIN" >/etc/nccl.conf
fi
log "aws-ofi-nccl: NCCL loads $(ld_path "$GPUFORGE_OFI_LIBRARY")"
