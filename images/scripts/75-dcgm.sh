#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# DCGM and dcgm-exporter from NVIDIA's CUDA repository, both enabled at boot.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

dcgm_packages=("$(pkg_dcgm)")
if (("${GPUFORGE_DCGM%%.*}" >= 4)); then
    # DCGM 4 splits the CUDA-dependent parts by CUDA major: the major of the CUDA user-mode driver
    # (what nvidia-smi reports), not the toolkit's. NVIDIA's DCGM install guide, "Determine the CUDA
    # major version appropriate for the system"; gpuforge derives it from the driver pin.
    dcgm_packages+=("datacenter-gpu-manager-${GPUFORGE_DCGM%%.*}-cuda${GPUFORGE_DCGM_CUDA_MAJOR}")
fi
install_pinned "$GPUFORGE_DCGM" "$NVIDIA_CUDA_HOST" "${dcgm_packages[@]}"
systemctl enable nvidia-dcgm.service

install_pinned "$(dcgm_exporter_version)" "$NVIDIA_CUDA_HOST" datacenter-gpu-manager-exporter
systemctl enable nvidia-dcgm-exporter.service
