#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Step 2: the NVIDIA driver at the pinned version, with the pinned kernel-module flavour,
# built by DKMS for the pinned kernel.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix
require_kernel

install_pinned "$GPUFORGE_DRIVER" "$NVIDIA_CUDA_HOST" "$(pkg_driver)"

# The driver metapackage depends on per-branch packages (DKMS source, libraries, utilities):
# hold every installed one at the driver's version, so nothing of the driver can move alone.
mapfile -t driver_parts < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' '*nvidia*' 2>/dev/null |
    awk -v v="$GPUFORGE_DRIVER" '$1 == "ii" && index($3, v) == 1 { print $2 }')
hold "${driver_parts[@]}"

built="$(module_field nvidia version)"
[[ "$built" == "$GPUFORGE_DRIVER" ]] ||
    die "nvidia_driver: the nvidia module built for $GPUFORGE_KERNEL is version '${built}', the matrix pins $GPUFORGE_DRIVER"
flavour="$(module_flavour)"
[[ "$flavour" == "$GPUFORGE_KERNEL_MODULES" ]] ||
    die "nvidia_kernel_modules: the nvidia module built for $GPUFORGE_KERNEL is $flavour, the matrix pins $GPUFORGE_KERNEL_MODULES"
log "driver $GPUFORGE_DRIVER ($flavour modules) built for $GPUFORGE_KERNEL"
