#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2153 # GPUFORGE_* values come from matrix.env
# The monitoring daemons from their publishers' release builds, each checked against the matrix's
# sha256 before anything is unpacked: node_exporter (every node), Prometheus and Alertmanager (run
# only on the controller). Each goes to /opt/gpuforge/<name>-<version> with its binaries linked into
# /usr/local/bin, where gpuforge's units (images/files/gpuforge-*.service, installed by
# 85-gpuforge.sh) start them, each as its own system user. Also installs dcgm-exporter's field list,
# rendered by gpuforge for the matrix's targets, where nvidia-dcgm-exporter-gpuforge-fields.conf points.
#
# A matrix that leaves a daemon out builds an image without it (matrix check warns where Slurm is
# pinned); its unit then finds no binary and does not start.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

# dcgm-exporter reads this file (`-f`); 75-dcgm.sh installed the exporter itself.
install -D -m 0644 "$GPUFORGE_PAYLOAD/monitoring/dcgm-exporter-fields.csv" "$ROOT$DCGM_FIELDS_FILE"
log "monitoring: dcgm-exporter field list in $DCGM_FIELDS_FILE"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Every pinned download is checked before the first is unpacked.
declare -A versions=([node_exporter]="$GPUFORGE_NODE_EXPORTER" [prometheus]="$GPUFORGE_PROMETHEUS"
    [alertmanager]="$GPUFORGE_ALERTMANAGER")
declare -A urls=([node_exporter]="$GPUFORGE_NODE_EXPORTER_URL" [prometheus]="$GPUFORGE_PROMETHEUS_URL"
    [alertmanager]="$GPUFORGE_ALERTMANAGER_URL")
declare -A sums=([node_exporter]="$GPUFORGE_NODE_EXPORTER_SHA256" [prometheus]="$GPUFORGE_PROMETHEUS_SHA256"
    [alertmanager]="$GPUFORGE_ALERTMANAGER_SHA256")
for name in "${MONITORING_DAEMONS[@]}"; do
    if [[ -z "${versions[$name]}" ]]; then
        log "monitoring: the matrix pins no $name; the image has none"
        continue
    fi
    download_checked "${urls[$name]}" "${sums[$name]}" "$work/$name.tar.gz"
done

for name in "${MONITORING_DAEMONS[@]}"; do
    [[ -n "${versions[$name]}" ]] || continue
    prefix="$(monitoring_prefix "$name" "${versions[$name]}")"
    rm -rf "$ROOT$prefix"
    mkdir -p "$ROOT$prefix"
    # Prometheus's builds hold one folder, <name>-<version>.linux-amd64/, with the binaries at its top.
    tar -xzf "$work/$name.tar.gz" -C "$ROOT$prefix" --strip-components=1 --no-same-owner
    for binary in ${MONITORING_BINARIES[$name]}; do
        [[ -x "$ROOT$prefix/$binary" ]] || die "$name: the release tarball holds no $binary (${urls[$name]})"
        mkdir -p "$ROOT/usr/local/bin"
        ln -sfn "$prefix/$binary" "$ROOT/usr/local/bin/$binary"
    done
    user="${MONITORING_USERS[$name]}"
    if ! getent passwd "$user" >/dev/null; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
    fi
    log "monitoring: $name ${versions[$name]} in $prefix, running as $user"
done

# Prometheus and Alertmanager read what the controller's user data writes here; the folder exists on
# every node, empty, so their units' conditions (a config file in it) keep them off the GPU nodes.
install -d -m 0755 "$ROOT$MONITORING_CONFIG_DIR"
