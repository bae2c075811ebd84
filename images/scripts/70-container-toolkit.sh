#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The NVIDIA Container Toolkit; its four packages are released together at one version.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

install_pinned "$GPUFORGE_CONTAINER_TOOLKIT" "$NVIDIA_TOOLKIT_HOST" \
    nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1
