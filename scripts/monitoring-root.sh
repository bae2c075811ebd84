#!/usr/bin/env bash
# Provides the real Prometheus, promtool, Alertmanager, amtool and node_exporter that the tests run:
# Debian testing (forky) carries the pinned series (prometheus 3.5.3, prometheus-alertmanager
# 0.33.1, prometheus-node-exporter 1.11.1; /work/shared/DESIGN.md), and their binaries run on the Debian 12 host (glibc 2.34).
# Debian 12 ships 2.42 and 0.25, older than the series gpuforge renders for.
# Lighter than a chroot: forky's index is read into a private apt folder, the five .deb files
# are downloaded and unpacked with `dpkg -x`; nothing is installed on the host.
# Usage: scripts/monitoring-root.sh [DIR]   (default .cache/monitoring-root; rebuilt only when absent)
# The binaries land in DIR/usr/bin; tests read GPUFORGE_MONITORING_ROOT or the default.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:-${GPUFORGE_MONITORING_ROOT:-.cache/monitoring-root}}"
mirror="${GPUFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The series tests/monitoring expects; a forky that moved past them fails here, not in a test.
prometheus_series="3.5."
alertmanager_series="0.33."
node_exporter_series="1.11."

if [ -f "$root/.gpuforge-complete" ]; then
    echo "==> monitoring test root: $root ($(cat "$root/.gpuforge-complete"))"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "==> monitoring test root: skipped (needs root, as the Slurm root does); the promtool tests will skip"
    exit 0
fi
echo "==> building the monitoring test root in $root (Debian forky's prometheus, promtool, alertmanager, node_exporter)"
rm -rf "$root"
apt_dir="$root.apt"
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror forky main" >"$apt_dir/sources.list"
apt_options=(
    -o "Dir::Etc::SourceList=$PWD/$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$PWD/$apt_dir/lists"
    -o "Dir::Cache=$PWD/$apt_dir/cache"
    -o "Acquire::Languages=none"
)
apt-get "${apt_options[@]}" update >"$root.log" 2>&1 || {
    tail -n 20 "$root.log"
    exit 1
}
(cd "$apt_dir/debs" && apt-get "${apt_options[@]}" download prometheus promtool prometheus-alertmanager prometheus-node-exporter) \
    >>"$root.log" 2>&1 || {
    tail -n 20 "$root.log"
    exit 1
}
for deb in "$apt_dir"/debs/*.deb; do
    dpkg -x "$deb" "$root"
done
prometheus_version="$("$root/usr/bin/prometheus" --version 2>&1 | head -n 1)"
alertmanager_version="$("$root/usr/bin/prometheus-alertmanager" --version 2>&1 | head -n 1)"
node_exporter_version="$("$root/usr/bin/prometheus-node-exporter" --version 2>&1 | head -n 1)"
case "$prometheus_version" in
*"version $prometheus_series"*) ;;
*)
    echo "forky's prometheus is not the ${prometheus_series}x series: $prometheus_version" >&2
    exit 1
    ;;
esac
case "$alertmanager_version" in
*"version $alertmanager_series"*) ;;
*)
    echo "forky's alertmanager is not the ${alertmanager_series}x series: $alertmanager_version" >&2
    exit 1
    ;;
esac
case "$node_exporter_version" in
*"version $node_exporter_series"*) ;;
*)
    echo "forky's node_exporter is not the ${node_exporter_series}x series: $node_exporter_version" >&2
    exit 1
    ;;
esac
rm -rf "$apt_dir"
echo "$prometheus_version; $alertmanager_version; $node_exporter_version" >"$root/.gpuforge-complete"
echo "==> monitoring test root: $root ($(cat "$root/.gpuforge-complete"))"
