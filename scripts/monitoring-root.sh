#!/usr/bin/env bash
# Provides the real Prometheus, promtool, Alertmanager, amtool and node_exporter that the tests run,
# at the versions the image matrices pin (images/matrices/*.yaml: prometheus, alertmanager,
# node_exporter; every matrix that pins one must pin the same version, or this fails):
# - prometheus and promtool: built from the Go module github.com/prometheus/prometheus at the
#   pinned release (Debian has no 3.13: forky carries 3.5.3). `go mod download` checks the module
#   against the Go checksum database (GOSUMDB, forced on below), the build checks every dependency
#   against the module's own go.sum (and `go mod verify` the cached copies), and the binaries must
#   report the pinned version. Built without the `builtinassets` tag: no web UI, which the tests do
#   not use (the HTTP API is the same).
# - prometheus-alertmanager, amtool and prometheus-node-exporter: Debian testing (forky)'s builds
#   (alertmanager 0.33.1, node-exporter 1.11.1), which must be the pinned series. forky's index is
#   read into a private apt folder, the .deb files are unpacked with `dpkg -x`; nothing is installed
#   on the host, and forky's binaries run on the Debian 12 host (/work/shared/DESIGN.md).
# The root is built in DIR.new and swapped in at the end, so tests keep running on the old one
# meanwhile; it is rebuilt only when the pins change (the first line of DIR/.gpuforge-complete).
# Go's caches live in .cache/go (a fresh CI machine fills them once; a rebuild reuses them).
# Usage: scripts/monitoring-root.sh [DIR]   (default .cache/monitoring-root)
#        scripts/monitoring-root.sh --pins               (the pinned versions, one "name version" a line)
#        scripts/monitoring-root.sh --module-version V   (the Go module version of Prometheus release V)
# The binaries land in DIR/usr/bin; tests read GPUFORGE_MONITORING_ROOT or the default.
set -euo pipefail
cd "$(dirname "$0")/.."
matrices="${GPUFORGE_MATRIX_DIR:-images/matrices}"
python=.venv/bin/python

# The Go module version of a Prometheus release: the server is tagged vX.Y.Z, its Go library
# v0.Y.Z for 2.x and v0.3YY.Z for 3.x (the module's own scripts/get_module_version.sh and RELEASE.md
# "Tag the library release"; e.g. 3.13.2 is v0.313.2, 3.5.3 v0.305.3, 2.54.1 v0.54.1). A release
# without its library tag makes `go mod download` fail below, naming the version.
module_version() {
    local version="${1#v}" major minor rest
    if ! [[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+(-[0-9A-Za-z.]+)?)$ ]]; then
        echo "Prometheus version '$1' is not MAJOR.MINOR.PATCH[-PRERELEASE]" >&2
        return 1
    fi
    major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}" rest="${BASH_REMATCH[3]}"
    if [ "$major" = 2 ]; then
        echo "v0.$((10#$minor)).$rest"
    elif [ "$major" = 3 ] && [ "$((10#$minor))" -lt 100 ]; then
        echo "v0.$((300 + 10#$minor)).$rest"
    else
        echo "no known Go module version for Prometheus $1 (known: 2.Y.Z is v0.Y.Z, 3.Y.Z is v0.3YY.Z)" >&2
        return 1
    fi
}

# The pinned versions, "name version" a line; fails where the matrices disagree or none pins one.
read_pins() {
    if [ ! -x "$python" ]; then
        echo "no $python: run scripts/bootstrap.sh dev first (the pins are read from $matrices with PyYAML)" >&2
        return 1
    fi
    "$python" -P - "$matrices" <<'EOF'
import sys
from pathlib import Path

import yaml

folder = Path(sys.argv[1])
files = sorted(folder.glob("*.yaml"))
pins: list[str] = []
failed = False
for key in ("prometheus", "alertmanager", "node_exporter"):
    versions: dict[str, list[str]] = {}
    for path in files:
        block = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get(key)
        if isinstance(block, dict) and block.get("version"):
            versions.setdefault(str(block["version"]), []).append(path.name)
    if len(versions) == 1:
        pins.append(f"{key} {next(iter(versions))}")
        continue
    failed = True
    if not versions:
        print(f"{folder}: no matrix pins {key}.version; pin it (the tests run the pinned release)", file=sys.stderr)
    else:
        found = "; ".join(f"{version} in {', '.join(names)}" for version, names in sorted(versions.items()))
        print(f"{folder}: the matrices pin different {key}.version values ({found}); pin one version in every matrix", file=sys.stderr)
if failed:
    sys.exit(1)
print("\n".join(pins))
EOF
}

case "${1:-}" in
--module-version)
    module_version "${2:?usage: $0 --module-version VERSION}"
    exit
    ;;
--pins)
    read_pins
    exit
    ;;
esac

root="$(realpath -m "${1:-${GPUFORGE_MONITORING_ROOT:-.cache/monitoring-root}}")"
mirror="${GPUFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
pins="$(read_pins)"
prometheus_pin="$(awk '$1 == "prometheus" {print $2}' <<<"$pins")"
alertmanager_pin="$(awk '$1 == "alertmanager" {print $2}' <<<"$pins")"
node_exporter_pin="$(awk '$1 == "node_exporter" {print $2}' <<<"$pins")"
module="$(module_version "$prometheus_pin")"
key="pins: prometheus $prometheus_pin, alertmanager $alertmanager_pin, node_exporter $node_exporter_pin"

# shellcheck source=scripts/lib-test-root.sh
. scripts/lib-test-root.sh
# shellcheck source=scripts/lib-go-module.sh
. scripts/lib-go-module.sh
test_root_exit_if_current monitoring test_root_marker_details
test_root_skip_unless_root monitoring "needs root, as the Slurm root does" "the promtool tests will skip"
go_toolchain "Prometheus $prometheus_pin"
test_root_lock monitoring
test_root_workspace

echo "==> monitoring test root: building Prometheus $prometheus_pin (Go module github.com/prometheus/prometheus@$module) in $staging"
go_module_copy "$go" "github.com/prometheus/prometheus@$module" \
    "Prometheus $prometheus_pin; is that library tag in https://proxy.golang.org/github.com/prometheus/prometheus/@v/list ?"
version_flags=(
    "-X github.com/prometheus/common/version.Version=$prometheus_pin"
    "-X github.com/prometheus/common/version.Revision=$module_sum"
    "-X github.com/prometheus/common/version.Branch=$module"
    "-X github.com/prometheus/common/version.BuildUser=gpuforge-monitoring-root"
    "-X github.com/prometheus/common/version.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
)
bin_dir="$(cd "$staging/usr/bin" && pwd)"
(
    cd "$build/src"
    "${go_env[@]}" "$go" mod verify
    "${go_env[@]}" "$go" build -trimpath -tags netgo -ldflags "-s -w ${version_flags[*]}" \
        -o "$bin_dir/" ./cmd/prometheus ./cmd/promtool
) >>"$log" 2>&1 || fail "building Prometheus $prometheus_pin failed"

echo "==> monitoring test root: Debian forky's prometheus-alertmanager and prometheus-node-exporter"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror forky main" >"$apt_dir/sources.list"
apt_options=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "Acquire::Languages=none"
)
apt-get "${apt_options[@]}" update >>"$log" 2>&1 || fail "apt-get update (forky) failed"
(cd "$apt_dir/debs" && apt-get "${apt_options[@]}" download prometheus-alertmanager prometheus-node-exporter) \
    >>"$log" 2>&1 || fail "apt-get download (forky) failed"
for deb in "$apt_dir"/debs/*.deb; do
    dpkg -x "$deb" "$staging"
done

# Each binary must report the pinned release (Prometheus, built here) or series (the Debian builds).
check_version() { # BINARY EXPECTED-PREFIX
    local reported
    # Whole output, then its first line: `| head -n 1` under pipefail can fail on SIGPIPE (exit 141).
    reported="$("$staging/usr/bin/$1" --version 2>&1)" || true
    reported="${reported%%$'\n'*}"
    case "$reported" in
    "$2"*) echo "$reported" ;;
    *)
        echo "$staging/usr/bin/$1 reports '$reported', not '$2...' (the pin in $matrices)" >&2
        return 1
        ;;
    esac
}
reported="$(
    check_version prometheus "prometheus, version $prometheus_pin " &&
        check_version promtool "promtool, version $prometheus_pin " &&
        check_version prometheus-alertmanager "alertmanager, version ${alertmanager_pin%.*}." &&
        check_version prometheus-node-exporter "node_exporter, version ${node_exporter_pin%.*}."
)" || exit 1
printf '%s\n%s\n' "$key" "$reported" >"$staging/.gpuforge-complete"
test_root_install monitoring
