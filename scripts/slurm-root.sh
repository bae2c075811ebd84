#!/usr/bin/env bash
# Builds the Slurm test root: a Debian testing (forky) chroot with real slurmctld, slurmd,
# slurmdbd, the client commands and MariaDB, which tests/scheduler starts one node per
# network namespace (and, for the accounting tests, MariaDB and slurmdbd beside slurmctld).
# Debian 12 ships Slurm 22.05; testing ships the 26.05 series the image matrices pin.
# Usage: scripts/slurm-root.sh [DIR]   (default .cache/slurm-root)
# The root is rebuilt only when absent or when its marker names another package list (a root
# built before slurmdbd and MariaDB were added is rebuilt once).
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:-${GPUFORGE_SLURM_ROOT:-.cache/slurm-root}}"
mirror="${GPUFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3: the node agent (standard library only) runs inside the root as Slurm's HealthCheckProgram.
# slurmdbd, mariadb-server, mariadb-client: Slurm accounting on a real database (tests/scheduler/
# test_accounting_daemons.py); sacct and sacctmgr come with slurm-client.
packages="slurmctld,slurmd,slurm-client,slurmdbd,mariadb-server,mariadb-client,python3"
key="packages=$packages"

# shellcheck source=scripts/lib-test-root.sh
. scripts/lib-test-root.sh
test_root_exit_if_current Slurm chroot "$root" slurmd -V
test_root_skip_unless_root Slurm "needs root for debootstrap and chroot" "the real-daemon tests will skip"
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "==> installing Debian package: debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
# Built beside the old root and swapped in when complete: tests running now mount the old root
# as an overlay's lower folder, which must not change under them.
new="$root.new"
echo "==> building the Slurm test root in $root (Debian forky, about a minute)"
mkdir -p "$(dirname "$root")"
rm -rf "$new"
debootstrap --variant=minbase --include="$packages" \
    forky "$new" "$mirror" /usr/share/debootstrap/scripts/sid >"$root.log" 2>&1 || {
    tail -n 20 "$root.log"
    exit 1
}
echo "$key" >"$new/.gpuforge-complete"
# An overlay names its lower folder by the path it was mounted with: a root in use is one some
# mount's lowerdir= names.
in_use() { grep -q "lowerdir=$(realpath "$root")[,:]" /proc/mounts; }
[ ! -e "$root" ] || mv "$root" "$root.old.$$"
mv "$new" "$root"
for stale in "$root".old.*; do
    [ -e "$stale" ] || continue
    if in_use; then
        echo "==> a running test may still read the previous root; $stale is removed by a later build"
    else
        rm -rf "$stale"
    fi
done
echo "==> Slurm test root: $root ($(chroot "$root" slurmd -V))"
