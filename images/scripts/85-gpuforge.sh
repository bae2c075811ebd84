#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# gpuforge itself (for `gpuforge node check` at boot) in /opt/gpuforge, and its systemd units.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

apt-get install "${APT_OPTIONS[@]}" --no-install-recommends python3-venv
python3 -m venv /opt/gpuforge
/opt/gpuforge/bin/pip install --quiet --disable-pip-version-check "$GPUFORGE_PAYLOAD/gpuforge-src" boto3
ln -sf /opt/gpuforge/bin/gpuforge /usr/local/bin/gpuforge
gpuforge --version

for unit in "$GPUFORGE_PAYLOAD"/files/*; do
    [[ -e "$unit" ]] || continue
    case "$unit" in
    *.service | *.timer)
        install -m 0644 "$unit" "/etc/systemd/system/$(basename "$unit")"
        systemctl enable "$(basename "$unit")"
        ;;
    *) die "files: $(basename "$unit") is not a systemd unit; this step installs *.service and *.timer files" ;;
    esac
done
systemctl daemon-reload
