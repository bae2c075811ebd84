#!/usr/bin/env bash
# Builds the Slurm test root: a Debian testing (forky) chroot with real slurmctld, slurmd
# and client commands, which tests/scheduler starts one node per network namespace.
# Debian 12 ships Slurm 22.05; testing ships the 26.05 series the image matrices pin.
# Usage: scripts/slurm-root.sh [DIR]   (default .cache/slurm-root; rebuilt only when absent)
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:-${GPUFORGE_SLURM_ROOT:-.cache/slurm-root}}"
mirror="${GPUFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ -f "$root/.gpuforge-complete" ]; then
    echo "==> Slurm test root: $root ($(chroot "$root" slurmd -V))"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "==> Slurm test root: skipped (needs root for debootstrap and chroot); the real-daemon tests will skip"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "==> installing Debian package: debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
echo "==> building the Slurm test root in $root (Debian forky, about 30 s)"
rm -rf "$root"
mkdir -p "$(dirname "$root")"
# python3: the node agent (standard library only) runs inside the root as Slurm's HealthCheckProgram.
debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,python3 \
    forky "$root" "$mirror" /usr/share/debootstrap/scripts/sid >"$root.log" 2>&1 || {
    tail -n 20 "$root.log"
    exit 1
}
touch "$root/.gpuforge-complete"
echo "==> Slurm test root: $root ($(chroot "$root" slurmd -V))"
