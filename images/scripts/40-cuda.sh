#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Step 4: the CUDA toolkit (the cuda-toolkit-X-Y package only), cuDNN and NCCL at exact versions.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

install_pinned "$GPUFORGE_CUDA" "$NVIDIA_CUDA_HOST" "$(pkg_cuda)"
install_pinned "$GPUFORGE_CUDNN" "$NVIDIA_CUDA_HOST" "$(pkg_cudnn)" "$(pkg_cudnn_dev)"
install_pinned "$GPUFORGE_NCCL" "$NVIDIA_CUDA_HOST" libnccl2 libnccl-dev

# The toolkit must not have replaced the pinned driver.
driver="$(installed_version "$(pkg_driver)")"
version_matches "$GPUFORGE_DRIVER" "$driver" ||
    die "nvidia_driver: installing CUDA changed $(pkg_driver) to '${driver}', the matrix pins $GPUFORGE_DRIVER"
