#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2153 # GPUFORGE_* values come from matrix.env
# Slurm and the PMIx it is built against, from source at the matrix's exact versions: both tarballs are
# checked against the matrix's sha256 before anything is built. PMIx goes to /opt/pmix; Slurm to /usr
# with its configuration in /etc/slurm, the mpi/pmix plugin built against that PMIx and the gpu/nvml
# plugin against the pinned CUDA's NVML and slurmdbd's accounting_storage/mysql plugin against the pinned
# MariaDB client library. MariaDB's server and client come from the OS archive at the matrix's exact version
# (the controller's local accounting database). Slurm's own systemd units for slurmctld, slurmdbd and slurmd,
# and MariaDB's, are installed and left disabled: the instance's user data enables the ones its role needs.
#
# A matrix without a `slurm` block builds an image without a scheduler: this step then does nothing.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

if [[ -z "$GPUFORGE_SLURM" ]]; then
    log "slurm: the matrix pins no Slurm; skipping the Slurm and PMIx step"
    exit 0
fi
[[ -n "$GPUFORGE_PMIX" ]] ||
    die "pmix: the matrix pins Slurm $GPUFORGE_SLURM but no PMIx (gpuforge matrix check refuses this matrix)"
[[ -n "$GPUFORGE_MARIADB" ]] ||
    die "mariadb: the matrix pins Slurm $GPUFORGE_SLURM but no MariaDB (gpuforge matrix check refuses this matrix)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Both downloads are checked before anything is installed or built.
download_checked "$GPUFORGE_PMIX_URL" "$GPUFORGE_PMIX_SHA256" "$work/pmix.tar.gz"
download_checked "$GPUFORGE_SLURM_URL" "$GPUFORGE_SLURM_SHA256" "$work/slurm.tar.gz"

# Build dependencies from the distribution (not pinned: they are not part of the image's contract).
# PMIx needs libevent, hwloc and zlib (its dependencies in Spack's builtin pmix package);
# Slurm's cgroup/v2 plugin needs D-Bus, and hwloc, json-c, yaml, lz4, numa and PAM are among the
# libraries Debian's slurm-wlm 26.05.5-1 builds with (Build-Depends in Debian's source index).
apt-get install "${APT_OPTIONS[@]}" --no-install-recommends build-essential pkg-config \
    libevent-dev libhwloc-dev zlib1g-dev libdbus-1-dev libjson-c-dev libyaml-dev liblz4-dev libnuma-dev \
    libpam0g-dev

# MariaDB from the OS archive (Ubuntu 22.04: source package mariadb-10.6, universe), every package of it at the
# matrix's exact version: apt refuses a version its index does not hold, so a stale pin stops the build here.
# policy-rc.d keeps the server's postinst from starting it in the build; the user data starts it on the controller.
mariadb_packages=(mariadb-server mariadb-server-10.6 mariadb-server-core-10.6 mariadb-client mariadb-client-10.6
    mariadb-client-core-10.6 mariadb-common libmariadb3 libmariadb-dev)
printf '#!/bin/sh\nexit 101\n' | install -m 0755 /dev/stdin /usr/sbin/policy-rc.d
apt-get install "${APT_OPTIONS[@]}" --no-install-recommends "${mariadb_packages[@]/%/=$GPUFORGE_MARIADB}"
rm -f /usr/sbin/policy-rc.d

# PMIx into its own prefix: it also builds libpmi/libpmi2, which must not collide with Slurm's in /usr.
mkdir "$work/pmix"
tar -xzf "$work/pmix.tar.gz" -C "$work/pmix" --strip-components=1
(
    cd "$work/pmix"
    ./configure --prefix="$GPUFORGE_PMIX_PREFIX"
    make -j "$(nproc)"
    make install
)
echo "$GPUFORGE_PMIX_PREFIX/lib" >/etc/ld.so.conf.d/gpuforge-pmix.conf
ldconfig

[[ -f "$GPUFORGE_CUDA_HOME/include/nvml.h" ]] ||
    die "slurm: no nvml.h under $GPUFORGE_CUDA_HOME (CUDA $GPUFORGE_CUDA); the gpu/nvml plugin cannot be built"

mkdir "$work/slurm"
tar -xzf "$work/slurm.tar.gz" -C "$work/slurm" --strip-components=1
(
    cd "$work/slurm"
    # --with-pmix and --with-nvml name an exact installation, so configure stops instead of building
    # Slurm without the plugin (SchedMD/slurm auxdir/x_ac_pmix.m4, x_ac_nvml.m4).
    ./configure --prefix=/usr --sysconfdir=/etc/slurm --with-pmix="$GPUFORGE_PMIX_PREFIX" \
        --with-nvml="$GPUFORGE_CUDA_HOME"
    make -j "$(nproc)"
    make install
    # configure writes the units from etc/*.service.in with the paths above.
    install -m 0644 etc/slurmctld.service etc/slurmdbd.service etc/slurmd.service /usr/lib/systemd/system/
)
# configure builds accounting_storage/mysql only where it finds the MySQL/MariaDB client library, and goes on
# without it otherwise (https://slurm.schedmd.com/accounting.html): slurmdbd would then store nothing.
[[ -f /usr/lib/slurm/accounting_storage_mysql.so ]] ||
    die "slurm: accounting_storage/mysql was not built (configure found no libmariadb-dev); slurmdbd needs it"
ldconfig

# The Amazon RDS CA bundle slurmdbd verifies an Aurora writer's certificate with (accounting.database: aurora;
# slurmdbd.conf StorageParameters=SSL_CA=...), checked against its pin first (images/files/rds-ca/README.md).
install_rds_ca_bundle

# The controller runs as SlurmUser=slurm; slurmd runs as root.
if ! getent passwd slurm >/dev/null; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin slurm
fi
install -d -m 0755 /etc/slurm /var/spool/slurmd
install -d -m 0755 -o slurm -g slurm /var/spool/slurmctld /var/log/slurm

# Installed, never enabled here: the user data enables slurmctld, slurmdbd and (accounting.database: local)
# MariaDB on the controller, slurmd on a node.
systemctl daemon-reload
systemctl disable slurmctld.service slurmdbd.service slurmd.service mariadb.service >/dev/null 2>&1 || true
log "slurm: $(/usr/sbin/slurmd -V) with PMIx $GPUFORGE_PMIX in $GPUFORGE_PMIX_PREFIX, MariaDB $GPUFORGE_MARIADB"
