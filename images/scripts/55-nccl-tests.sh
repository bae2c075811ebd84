#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2153 # GPUFORGE_* values come from matrix.env
# NVIDIA's nccl-tests (all_reduce_perf and the other *_perf binaries the acceptance run uses), from the
# matrix's pinned release tarball, checked against its sha256 before anything is built. Built with MPI
# against the EFA installer's Open MPI (/opt/amazon/openmpi, where the installer puts it:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html), the pinned CUDA, and the
# NCCL the CUDA step installed from NVIDIA's repository (headers and library under /usr); the binaries
# go to /usr/local/bin, where `gpuforge validate` runs them through srun.
#
# A matrix without an `nccl_tests` block builds an image without them: this step then does nothing.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

if [[ -z "$GPUFORGE_NCCL_TESTS" ]]; then
    log "nccl-tests: the matrix pins none; skipping"
    exit 0
fi
readonly MPI_HOME=/opt/amazon/openmpi
[[ -x "$MPI_HOME/bin/mpicc" ]] ||
    die "nccl-tests: no Open MPI at $MPI_HOME (the EFA step installs it); nccl-tests is built with MPI=1 against it"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
download_checked "$GPUFORGE_NCCL_TESTS_URL" "$GPUFORGE_NCCL_TESTS_SHA256" "$work/nccl-tests.tar.gz"
mkdir "$work/src"
tar -xzf "$work/nccl-tests.tar.gz" -C "$work/src" --strip-components=1
make -C "$work/src" -j "$(nproc)" MPI=1 MPI_HOME="$MPI_HOME" CUDA_HOME="$GPUFORGE_CUDA_HOME" NCCL_HOME=/usr
install -m 0755 "$work"/src/build/*_perf /usr/local/bin/
log "nccl-tests $GPUFORGE_NCCL_TESTS: $(cd /usr/local/bin && echo ./*_perf)"
