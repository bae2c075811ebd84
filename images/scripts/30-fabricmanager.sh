#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Step 3: nvidia-fabricmanager and DCGM's libnvidia-nscq at the driver's exact version, the NVLink
# Subnet Manager where pinned (with the kernel modules it needs loaded before Fabric Manager starts),
# and nvidia-persistenced enabled.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

if [[ -n "$GPUFORGE_FABRICMANAGER" ]]; then
    install_pinned "$GPUFORGE_FABRICMANAGER" "$NVIDIA_CUDA_HOST" "$(pkg_fabricmanager)"
    if [[ "$GPUFORGE_NVSWITCH" == 1 ]]; then
        # Fabric Manager only runs on NVSwitch boards; every NVSwitch target needs it at boot.
        systemctl enable nvidia-fabricmanager.service
    fi
fi
if [[ -n "$GPUFORGE_NSCQ" ]]; then
    install_pinned "$GPUFORGE_NSCQ" "$NVIDIA_CUDA_HOST" "$(pkg_nscq)"
fi
if [[ -n "$GPUFORGE_NVLSM" ]]; then
    # NVLink 5: Fabric Manager's start script runs NVLSM first; both need ib_umad and mlx5_core.
    install_pinned "$GPUFORGE_NVLSM" "$NVIDIA_CUDA_HOST" nvlsm
    write_nvlink5_prerequisites
fi
systemctl enable nvidia-persistenced.service
