#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# DCGM and dcgm-exporter from NVIDIA's CUDA repository, both enabled at boot.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

dcgm_packages=("$(pkg_dcgm)")
if (("${GPUFORGE_DCGM%%.*}" >= 4)); then
    # DCGM 4 splits the CUDA-dependent parts by CUDA major.
    dcgm_packages+=("datacenter-gpu-manager-${GPUFORGE_DCGM%%.*}-cuda$(cuda_major)")
fi
install_pinned "$GPUFORGE_DCGM" "$NVIDIA_CUDA_HOST" "${dcgm_packages[@]}"
systemctl enable nvidia-dcgm.service

install_pinned "$(dcgm_exporter_version)" "$NVIDIA_CUDA_HOST" datacenter-gpu-manager-exporter
systemctl enable nvidia-dcgm-exporter.service
