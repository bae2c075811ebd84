#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The FSx for Lustre client modules built for the pinned kernel.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix
require_kernel

install_pinned "$GPUFORGE_LUSTRE" "$FSX_HOST" "$(pkg_lustre)"
