#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# gpuforge itself (for `gpuforge node check` at boot) in /opt/gpuforge, its systemd units, and
# slurmd's drop-in that starts slurmd only after the boot check passed.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

# gpuforge needs Python 3.11+; Ubuntu 22.04's python3 is 3.10, and its python3.11 package is 3.11.
python=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    python=python3.11
fi
apt-get install "${APT_OPTIONS[@]}" --no-install-recommends "$python" "$python-venv"
"$python" -m venv /opt/gpuforge
# Every dependency (and pip and the build backend) from the hashed lock, wheels only: pip refuses a
# file whose sha256 differs and any package the lock does not name (scripts/lock-image-python.py
# writes it from pyproject.toml). gpuforge itself then builds from the payload's source copy, with
# nothing fetched.
pip_install=(/opt/gpuforge/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip_install[@]}" --require-hashes --no-deps --only-binary=:all: -r "$GPUFORGE_PAYLOAD/scripts/gpuforge-requirements.txt"
"${pip_install[@]}" --no-deps --no-index --no-build-isolation "$GPUFORGE_PAYLOAD/gpuforge-src"
/opt/gpuforge/bin/python -m pip check
ln -sf /opt/gpuforge/bin/gpuforge /usr/local/bin/gpuforge
gpuforge --version

for unit in "$GPUFORGE_PAYLOAD"/files/*; do
    # Files only: a folder (files/kubernetes/, which 72-kubernetes.sh installs) is not a unit.
    [[ -f "$unit" ]] || continue
    case "$unit" in
    */gpuforge-prometheus.service | */gpuforge-alertmanager.service | */gpuforge-sync-accounts.service)
        # The controller's units: installed on every node, never enabled here. The controller's user
        # data writes their configuration (/etc/gpuforge/monitoring, /etc/slurm/gpuforge-accounts.json)
        # and enables them.
        install -m 0644 "$unit" "/etc/systemd/system/$(basename "$unit")"
        ;;
    *.service | *.timer)
        install -m 0644 "$unit" "/etc/systemd/system/$(basename "$unit")"
        systemctl enable "$(basename "$unit")"
        ;;
    */slurmdbd-*.conf)
        # A drop-in for slurmdbd.service: slurmdbd-gpuforge.conf -> gpuforge.conf (only the controller runs it).
        name="$(basename "$unit")"
        install -D -m 0644 "$unit" "/etc/systemd/system/slurmdbd.service.d/${name#slurmdbd-}"
        ;;
    */slurmd-*.conf)
        # A drop-in for slurmd.service, named by what it adds: slurmd-gpuforge.conf -> gpuforge.conf.
        name="$(basename "$unit")"
        install -D -m 0644 "$unit" "/etc/systemd/system/slurmd.service.d/${name#slurmd-}"
        ;;
    */nvidia-dcgm-exporter-*.conf)
        # A drop-in for dcgm-exporter's unit: nvidia-dcgm-exporter-gpuforge-jobs.conf -> gpuforge-jobs.conf.
        name="$(basename "$unit")"
        install -D -m 0644 "$unit" "/etc/systemd/system/nvidia-dcgm-exporter.service.d/${name#nvidia-dcgm-exporter-}"
        ;;
    *) die "files: $(basename "$unit") is not a systemd unit or drop-in; this step installs *.service, *.timer, slurmd-*.conf, slurmdbd-*.conf and nvidia-dcgm-exporter-*.conf files" ;;
    esac
done

# Slurm's HealthCheckProgram is a path run without arguments: this wrapper adds --slurm and the
# cluster's flags from the user data's env file (e.g. --report-asg --require-fsx).
install -D -m 0755 /dev/stdin /usr/local/sbin/gpuforge-slurm-healthcheck <<'WRAPPER'
#!/bin/sh
# gpuforge's Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/usr/local/sbin/gpuforge-slurm-healthcheck).
GPUFORGE_NODE_CHECK_ARGS=""
if [ -r /etc/gpuforge/node-check.env ]; then
    # shellcheck source=/dev/null
    . /etc/gpuforge/node-check.env
fi
# The env file holds a list of flags: split on purpose.
# shellcheck disable=SC2086
exec /usr/local/bin/gpuforge node check --slurm $GPUFORGE_NODE_CHECK_ARGS
WRAPPER

# Slurm's Prolog and Epilog (slurm.conf Prolog=/Epilog=, gpuforge/scheduler/render.py SlurmSite): the
# job mapping files dcgm-exporter labels GPUs from (gpuforge/node/job_mapping.py). They exit 0 whatever
# happens, because slurmd drains a node whose prolog fails; gpuforge's messages go to the journal,
# tagged gpuforge-prolog and gpuforge-epilog.
for step in prolog epilog; do
    install -D -m 0755 /dev/stdin "/usr/local/sbin/gpuforge-slurm-$step" <<WRAPPER
#!/bin/sh
# gpuforge's Slurm ${step^} (slurm.conf: ${step^}=/usr/local/sbin/gpuforge-slurm-$step); always exits 0.
/usr/local/bin/gpuforge node $step 2>&1 | /usr/bin/logger -t gpuforge-$step
exit 0
WRAPPER
done
systemctl daemon-reload
