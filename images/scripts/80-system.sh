#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Freeze the image: every pinned package held, unattended upgrades off, huge pages reserved.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

mapfile -t pinned < <(sort -u "$PINNED_LIST")
apt-mark hold "${pinned[@]}" >/dev/null
mapfile -t held < <(apt-mark showhold)
for package in "${pinned[@]}"; do
    printf '%s\n' "${held[@]}" | grep -qx "$package" || die "hold: $package is not held"
done
log "${#pinned[@]} pinned packages held"

# No package may move after the build: stop the periodic apt jobs and unattended upgrades.
cat >/etc/apt/apt.conf.d/20auto-upgrades <<'APT'
APT::Periodic::Update-Package-Lists "0";
APT::Periodic::Unattended-Upgrade "0";
APT
systemctl disable --now apt-daily.timer apt-daily-upgrade.timer
if systemctl list-unit-files unattended-upgrades.service >/dev/null 2>&1; then
    systemctl disable --now unattended-upgrades.service
fi

# 2 MiB huge pages for libfabric's EFA provider, which uses them for its buffers when available
# (FI_EFA_USE_HUGE_PAGE, on by default). 2048 pages (4 GiB) is gpuforge's choice: small beside the
# memory of any EFA GPU instance, enough for one process per GPU.
echo "vm.nr_hugepages = 2048" >/etc/sysctl.d/90-gpuforge-hugepages.conf
