"""The node's user data: a bash script that cloud-init runs at first boot.

It does three things, each idempotent, and every boot:

1. stripes every instance-store NVMe disk of the type (the count comes from the
   hardware catalog) into RAID0 with an XFS file system labelled `scratch`, mounted
   at /scratch. One disk is formatted directly; no disks means no step at all.
   On a reboot the array and its label survive and are mounted again, never
   re-created; after a stop/start the disks are blank and the array is rebuilt.
2. mounts FSx for Lustre at /fsx (DNS name + mount name) with the fstab line AWS
   documents for mounting on reboot;
3. writes /etc/gpuforge/node-check.env and runs the node agent's health check
   (`gpuforge node check`, installed on the AMI), which reports an unhealthy node
   to its Auto Scaling group, then marks the check done for this boot
   (/run/gpuforge/node-check.done) so the image's gpuforge-node-check.service,
   which runs after cloud-init at every boot, does not check the node twice.

4. on a Slurm cluster, once this boot's node check has passed (the agent writes
   /run/gpuforge/node-check.passed only on a pass), joins Slurm as a dynamic node:
   fetches the shared Slurm key from Secrets Manager, writes /etc/default/slurmd with
   `SLURMD_OPTIONS="-Z -N <instance id> --conf-server <controller>:<port> --conf '<registration>'"`
   and starts slurmd. The Slurm node name is the EC2 instance id, so one Auto Scaling
   instance is one Slurm node and EC2's topology maps onto Slurm's by name. The image's
   slurmd drop-in (images/files/slurmd-gpuforge.conf) holds the same gate for later
   boots, so slurmd, which is enabled, never starts before the check; and `gpuforge-slurm-leave.service`
   runs `scontrol delete nodename=<instance id>` when the node shuts down, so a
   replaced node leaves no record behind. It is a unit of its own, ordered after
   slurmd (so it stops first, while slurmd's configless copy of slurm.conf under
   /run/slurm still exists), and not an ExecStopPost of slurmd, which would also
   delete the node on every slurmd restart.

cloud-init runs user data once per instance, so the script copies itself into
cloud-init's per-boot directory (which runs before user scripts, so the first boot
does not run it twice). A failed step does not stop the later ones: the health
check still runs and reports the node, and the script exits non-zero.

`render_controller` is the Slurm controller's script (see `ControllerParams`); the
two share the step runner and the key fetch. With `Accounting` it also runs slurmdbd: the
local MariaDB on the state volume (`setup_mariadb`) or Aurora's RDS-managed secret, then
slurmdbd.conf written 0600 for SlurmUser (`write_slurmdbd_conf`), slurmdbd before slurmctld. After slurmctld it
starts the image's gpuforge-sync-accounts.service, which applies the rendered gpuforge-accounts.json. The key never appears in either script:
each fetches it at boot with the instance role, which may read that one secret.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuforge.scheduler.render import ACCOUNTS_FILE, RDS_CA_BUNDLE

SCRATCH_MOUNT = "/scratch"
# XFS labels are at most 12 characters (xfs_admin(8)).
SCRATCH_LABEL = "scratch"
FSX_MOUNT = "/fsx"
NODE_CHECK_ENV = "/etc/gpuforge/node-check.env"
# Written once the check has run in this boot; /run is emptied at every boot. The image's
# gpuforge-node-check.service skips itself when it exists, so a node is checked once per boot
# whether the user data or the unit gets there first.
NODE_CHECK_DONE = "/run/gpuforge/node-check.done"
# Amazon FSx for Lustre User Guide, "Mounting Amazon FSx file systems automatically":
# https://docs.aws.amazon.com/fsx/latest/LustreGuide/mount-fs-auto-mount-onreboot.html
FSX_FSTAB_OPTIONS = "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service"
PER_BOOT_COPY = "/var/lib/cloud/scripts/per-boot/gpuforge-node-setup.sh"
CONTROLLER_PER_BOOT_COPY = "/var/lib/cloud/scripts/per-boot/gpuforge-slurmctld-setup.sh"
# Written by `gpuforge node check` when the boot gate passes (gpuforge.node.context.HostPaths.boot_pass_marker).
NODE_CHECK_PASSED = "/run/gpuforge/node-check.passed"
# The image's Python with boto3 and gpuforge (images/scripts/85-gpuforge.sh makes this virtualenv).
GPUFORGE_PYTHON = "/opt/gpuforge/bin/python"
# Where Slurm reads its files and auth/slurm its key (images/scripts/45-slurm.sh: --sysconfdir=/etc/slurm,
# --prefix=/usr). Source: https://slurm.schedmd.com/authentication.html#slurm
SLURM_ETC = "/etc/slurm"
SLURM_KEY_FILE = "/etc/slurm/slurm.key"
SCONTROL = "/usr/bin/scontrol"
# Slurm's own slurmd.service reads SLURMD_OPTIONS from here (EnvironmentFile=-/etc/default/slurmd).
SLURMD_DEFAULTS = "/etc/default/slurmd"
SLURMCTLD_DROP_IN = "/etc/systemd/system/slurmctld.service.d/slurmctld-gpuforge.conf"
# Read by images/files/gpuforge-slurm-topology.service; its presence is what turns the sync on.
TOPOLOGY_ENV = "/etc/gpuforge/slurm-topology.env"
TOPOLOGY_TIMER = "gpuforge-slurm-topology.timer"
SLURM_LEAVE_UNIT = "/etc/systemd/system/gpuforge-slurm-leave.service"
# images/files/gpuforge-alert-receiver.service: Alertmanager's drain receiver (gpuforge.monitoring.receiver).
ALERT_RECEIVER_UNIT = "gpuforge-alert-receiver.service"
# The image's gpuforge-prometheus.service and gpuforge-alertmanager.service (images/scripts/77-monitoring.sh)
# start only where this folder holds prometheus.yml + prometheus.flags, resp. alertmanager.yml.
MONITORING_ETC = "/etc/gpuforge/monitoring"
MONITORING_UNITS = ("gpuforge-prometheus.service", "gpuforge-alertmanager.service")
# A monitoring file's path under MONITORING_ETC: plain names, at most one folder (rules/), never "..".
_MONITORING_PATH = re.compile(r"(?:[a-z0-9_-]+/)?[a-z0-9_-]+(?:\.[a-z0-9_-]+)+", re.ASCII)
# slurmdbd (Slurm accounting): its configuration as rendered (gpuforge.scheduler.render, without any password) is
# kept here; the file slurmdbd reads is written from it at every boot with the database's connection and password,
# 0600 and owned by SlurmUser, as slurmdbd.conf(5) asks ("should only be readable by the user which executes SlurmDBD").
SLURMDBD_CONF_NAME = "slurmdbd.conf"
SLURMDBD_TEMPLATE = "/etc/gpuforge/slurmdbd.conf.rendered"
SLURMCTLD_UNIT_DIR = "/etc/systemd/system/slurmctld.service.d"
# The rendered teams, users and QOS, applied by the image's gpuforge-sync-accounts.service (images/files/) once
# slurmdbd and slurmctld are up; it retries a failed sacctmgr.
ACCOUNTS_FILE_NAME = ACCOUNTS_FILE
SYNC_ACCOUNTS_UNIT = "gpuforge-sync-accounts.service"
# The local MariaDB (accounting.database: local): its data and the password generated at its first boot both live on
# the controller's encrypted state volume, so a replaced controller keeps its job history and its password.
MARIADB_SUBDIR = "mariadb"
ACCOUNTING_PASSWORD_NAME = "accounting-db.password"
# Ubuntu's MariaDB reads /etc/mysql/mariadb.conf.d/*.cnf in name order: 90- comes after the package's 50-server.cnf.
MARIADB_CNF = "/etc/mysql/mariadb.conf.d/90-gpuforge.cnf"
MARIADB_DROP_IN = "/etc/systemd/system/mariadb.service.d/mariadb-gpuforge.conf"
# slurmdbd's database (StorageLoc's default, slurmdbd.conf(5)) and the local user it connects as.
ACCOUNTING_DATABASE_NAME = "slurm_acct_db"
# Aurora requires TLS (require_secure_transport=ON); slurmdbd verifies the server with RDS_CA_BUNDLE (the renderer's
# constant, imported above: slurmdbd.conf StorageParameters=SSL_CA=..., slurmdbd.conf(5) of Slurm 26.05). The
# certificate bundles are at truststore.pki.rds.amazonaws.com; the image must carry it.
LOCAL_STORAGE_USER = "slurm"
# XFS label of slurmctld's state volume (at most 12 characters, xfs_admin(8)).
STATE_LABEL = "slurmctld"
# How long the controller waits for its state volume: the attachment is made after the instance exists.
STATE_VOLUME_WAIT_S = 600
# Keeps the controller's hostname (SlurmctldHost) across reboots: cloud-init's update_hostname module
# would otherwise set the EC2 name again at every boot.
# Source: https://cloudinit.readthedocs.io/en/latest/reference/modules.html#set-hostname
CLOUD_INIT_HOSTNAME_CFG = "/etc/cloud/cloud.cfg.d/99-gpuforge-hostname.cfg"
# Characters a value may hold to pass through /etc/default/slurmd's double quotes and the single
# quotes around --conf unchanged (systemd reads the file, then splits $SLURMD_OPTIONS on unquoted space).
# Matched whole (fullmatch): `$` would let a trailing newline through into the file.
_PLAIN_OPTION = re.compile(r"[A-Za-z0-9 =,:._/+-]+")
# A DNS name or address (an Aurora cluster endpoint, localhost): written unquoted into slurmdbd.conf.
_HOST = re.compile(r"[A-Za-z0-9.-]+")


@dataclass(frozen=True)
class FsxMount:
    dns_name: str
    mount_name: str


@dataclass(frozen=True)
class SlurmJoin:
    """How a GPU node joins its cluster's Slurm: plain values (resolve Outputs first).

    `conf_server` is the controller's `address:port`; `registration` is what
    `gpuforge.scheduler.render.node_registration` gives for the cluster.
    """

    conf_server: str
    registration: str
    key_secret_arn: str
    slurm_user: str = "slurm"


@dataclass(frozen=True)
class UserDataParams:
    """What one node group's script needs; all plain values (resolve Outputs first)."""

    cluster: str
    instance_type: str
    scratch_disks: int
    fsx: FsxMount | None
    report_to_asg: bool
    slurm: SlurmJoin | None = None

    @property
    def node_check_args(self) -> str:
        args = []
        if self.report_to_asg:
            args.append("--report-asg")
        if self.fsx is not None:
            args.append("--require-fsx")
        return " ".join(args)


_HEADER = """#!/bin/bash
# gpuforge node setup for cluster {cluster} ({instance_type}): NVMe scratch, FSx, health check.
# Generated by gpuforge.components.user_data; every step is idempotent and runs at every boot.
set -euo pipefail
"""

_COMMON = r"""
FAILED_STEPS=()

log() {
    echo "$LOG_TAG: $*" >&2
}

# Runs one step with errexit on, in a subshell, and records a failure without stopping
# the steps after it (errexit is ignored in functions called from a condition).
step() {
    local status
    set +e
    (set -e; "$@")
    status=$?
    set -e
    if ((status != 0)); then
        log "step $1 failed with exit status $status"
        FAILED_STEPS+=("$1")
    fi
}

# cloud-init runs user data once per instance; its per-boot scripts run at every boot.
install_per_boot() {
    local self
    self="$(readlink -f "$0")"
    if [[ "$self" != "$PER_BOOT_COPY" ]]; then
        install -D -m 0755 "$self" "$PER_BOOT_COPY"
    fi
}
"""

_SCRATCH = r"""
# Instance-store NVMe disks name themselves by model; EBS volumes say "Elastic Block Store".
instance_store_disks() {
    lsblk --nodeps --noheadings --paths --output NAME,MODEL |
        awk '/Amazon EC2 NVMe Instance Storage/ {print $1}'
}

setup_scratch() {
    local device disks
    if mountpoint -q "$SCRATCH_MOUNT"; then
        log "$SCRATCH_MOUNT is already mounted"
        return 0
    fi
    mkdir -p "$SCRATCH_MOUNT"
    device="$(blkid -L "$SCRATCH_LABEL" || true)"
    if [[ -z "$device" ]]; then
        # After a reboot the array exists but may not be assembled yet.
        mdadm --assemble --scan >/dev/null 2>&1 || true
        udevadm settle
        device="$(blkid -L "$SCRATCH_LABEL" || true)"
    fi
    if [[ -z "$device" ]]; then
        mapfile -t disks < <(instance_store_disks)
        if ((${#disks[@]} != SCRATCH_DISKS)); then
            log "expected $SCRATCH_DISKS instance-store NVMe disks, found ${#disks[@]}: ${disks[*]:-none}"
            return 1
        fi
        if ((SCRATCH_DISKS == 1)); then
            device="${disks[0]}"
        else
            mdadm --create /dev/md/scratch --run --level=0 --raid-devices="$SCRATCH_DISKS" "${disks[@]}"
            device=/dev/md/scratch
        fi
        mkfs.xfs -f -L "$SCRATCH_LABEL" "$device"
    fi
    if ! grep -q "^LABEL=$SCRATCH_LABEL " /etc/fstab; then
        echo "LABEL=$SCRATCH_LABEL $SCRATCH_MOUNT xfs defaults,noatime,nofail,x-systemd.device-timeout=30s 0 2" \
            >>/etc/fstab
    fi
    mount "$SCRATCH_MOUNT"
    chmod 1777 "$SCRATCH_MOUNT"
}
"""

_FSX = r"""
mount_fsx() {
    local source="$FSX_DNS_NAME@tcp:/$FSX_MOUNT_NAME"
    local attempt
    mkdir -p "$FSX_MOUNT"
    if ! grep -qF "$source $FSX_MOUNT " /etc/fstab; then
        echo "$source $FSX_MOUNT lustre $FSX_FSTAB_OPTIONS 0 0" >>/etc/fstab
    fi
    if mountpoint -q "$FSX_MOUNT"; then
        log "$FSX_MOUNT is already mounted"
        return 0
    fi
    for attempt in 1 2 3 4 5; do
        if mount -t lustre -o relatime,flock "$source" "$FSX_MOUNT"; then
            return 0
        fi
        log "mounting $source failed (attempt $attempt of 5)"
        sleep 15
    done
    return 1
}
"""

_NODE_CHECK = r"""
write_node_check_env() {
    local tmp
    install -d -m 0755 "$(dirname "$NODE_CHECK_ENV")" /var/log/gpuforge
    tmp="$(mktemp "$NODE_CHECK_ENV.XXXXXX")"
    printf 'GPUFORGE_NODE_CHECK_ARGS="%s"\n' "$NODE_CHECK_ARGS" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$NODE_CHECK_ENV"
}

run_node_check() {
    local status=0
    # shellcheck source=/dev/null
    . "$NODE_CHECK_ENV"
    # The flags are split on purpose: the env file holds a list of them.
    # shellcheck disable=SC2086
    /usr/local/bin/gpuforge node check --json --report-dir /var/log/gpuforge $GPUFORGE_NODE_CHECK_ARGS || status=$?
    install -D -m 0644 /dev/null "$NODE_CHECK_DONE"
    return "$status"
}
"""


# The key is fetched at every boot with the instance role; it is never written into the script.
# mktemp makes the file 0600, so the key is never readable by others, not even for a moment.
_SLURM_KEY = r"""
fetch_slurm_key() {
    local tmp attempt
    install -d -m 0755 "$(dirname "$SLURM_KEY_FILE")"
    tmp="$(mktemp "$SLURM_KEY_FILE.XXXXXX")"
    for attempt in 1 2 3 4 5; do
        if "$GPUFORGE_PYTHON" - "$SLURM_KEY_SECRET_ARN" "$tmp" <<'PYTHON'
import base64
import sys

import boto3

arn, path = sys.argv[1], sys.argv[2]
client = boto3.client("secretsmanager", region_name=arn.split(":")[3])
secret = client.get_secret_value(SecretId=arn)["SecretString"]
with open(path, "wb") as key:
    key.write(base64.b64decode(secret, validate=True))
PYTHON
        then
            chown "$SLURM_USER:$SLURM_USER" "$tmp"
            chmod 0600 "$tmp"
            mv -f "$tmp" "$SLURM_KEY_FILE"
            return 0
        fi
        log "fetching the Slurm key from $SLURM_KEY_SECRET_ARN failed (attempt $attempt of 5)"
        sleep 10
    done
    rm -f "$tmp"
    return 1
}
"""

# Writes its standard input to $1 (mode 0644) in one rename, so a reader never sees half a file.
_WRITE_FILE = r"""
write_file() {
    local tmp
    install -d -m 0755 "$(dirname "$1")"
    tmp="$(mktemp "$1.XXXXXX")"
    cat >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$1"
}
"""

_SLURMD = r"""
imds() {
    local token
    token="$(curl -sSf --retry 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' \
        http://169.254.169.254/latest/api/token)"
    curl -sSf --retry 5 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

join_slurm() {
    local node
    if [[ ! -e "$NODE_CHECK_PASSED" ]]; then
        log "not joining Slurm: the node check did not pass in this boot"
        return 0
    fi
    fetch_slurm_key
    # The Slurm node name is the instance id: one instance, one Slurm node.
    node="$(imds instance-id)"
    printf 'SLURMD_OPTIONS="-Z -N %s --conf-server %s --conf %s"\n' \
        "$node" "$SLURM_CONF_SERVER" "'$SLURM_NODE_CONF'" | write_file "$SLURMD_DEFAULTS"
    write_file "$SLURM_LEAVE_UNIT" <<UNIT
# Written by gpuforge's user data: this node ($node) leaves Slurm when it shuts down.
[Unit]
Description=gpuforge: delete Slurm node $node at shutdown
After=slurmd.service network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=-$SCONTROL delete nodename=$node
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable --now gpuforge-slurm-leave.service
    systemctl enable --now slurmd.service
}
"""

_CONTROLLER_HEADER = """#!/bin/bash
# gpuforge Slurm controller for cluster {cluster}: hostname, state volume, config files, key, slurmctld.
# Generated by gpuforge.components.user_data; every step is idempotent and runs at every boot.
set -euo pipefail
"""

_CONTROLLER = r"""
set_hostname() {
    hostnamectl set-hostname "$SLURMCTLD_HOST"
    printf 'preserve_hostname: true\n' | write_file "$CLOUD_INIT_HOSTNAME_CFG"
    if ! grep -q " $SLURMCTLD_HOST\$" /etc/hosts; then
        echo "$SLURMCTLD_ADDR $SLURMCTLD_HOST" >>/etc/hosts
    fi
}

# On Nitro instances an EBS volume is an NVMe device whose serial is the volume id without its dash.
mount_state() {
    local device="/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_${STATE_VOLUME_ID//-/}"
    local waited=0
    if mountpoint -q "$STATE_DIR"; then
        log "$STATE_DIR is already mounted"
        return 0
    fi
    while [[ ! -e "$device" ]]; do
        if ((waited >= STATE_VOLUME_WAIT_S)); then
            log "the state volume $STATE_VOLUME_ID did not appear at $device within ${STATE_VOLUME_WAIT_S}s"
            return 1
        fi
        sleep 5
        waited=$((waited + 5))
    done
    # blkid finds no file system only on the volume's first use; later boots keep slurmctld's state.
    if ! blkid "$device" >/dev/null; then
        mkfs.xfs -L "$STATE_LABEL" "$device"
    fi
    if ! grep -q "^LABEL=$STATE_LABEL " /etc/fstab; then
        echo "LABEL=$STATE_LABEL $STATE_DIR xfs defaults,noatime,nofail 0 2" >>/etc/fstab
    fi
    mkdir -p "$STATE_DIR"
    mount "$STATE_DIR"
    # A volume grown in place (a larger STATE_VOLUME_GIB) gets its new space at the next boot.
    xfs_growfs "$STATE_DIR" >/dev/null
    chown "$SLURM_USER:$SLURM_USER" "$STATE_DIR"
    chmod 0700 "$STATE_DIR"
}

start_topology_sync() {
    write_file "$TOPOLOGY_ENV" <<ENV
GPUFORGE_CLUSTER=$TOPOLOGY_CLUSTER
GPUFORGE_INSTANCE_TYPE=$TOPOLOGY_INSTANCE_TYPE
GPUFORGE_REGION=$TOPOLOGY_REGION
ENV
    systemctl daemon-reload
    systemctl enable --now "$TOPOLOGY_TIMER"
}

start_alert_receiver() {
    systemctl enable --now "$ALERT_RECEIVER_UNIT"
}

# Enabled for later boots, started without waiting: the unit is a oneshot that systemd restarts while sacctmgr
# fails (slurmdbd or slurmctld still starting), and the boot must not wait on those retries.
start_sync_accounts() {
    systemctl daemon-reload
    systemctl enable "$SYNC_ACCOUNTS_UNIT"
    systemctl start --no-block "$SYNC_ACCOUNTS_UNIT"
}

start_slurmctld() {
    write_file "$SLURMCTLD_DROP_IN" <<UNIT
# Written by gpuforge's user data: slurmctld's state lives on its own volume; never start without it.
# With accounting it starts after slurmdbd, so it registers the cluster at once.
[Unit]
RequiresMountsFor=$STATE_DIR
$SLURMCTLD_ORDER
UNIT
    systemctl daemon-reload
    systemctl enable --now slurmctld.service
}
"""


# slurmdbd.conf as slurmdbd reads it: the rendered file, less any Storage{Host,Port,User,Pass} line it holds, plus the
# connection and the password read here (from the root-only file on the state volume, or from the RDS-managed secret,
# {"username", "password"}, https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/rds-secrets-manager.html).
# Slurm's config parser ends a value at an unescaped '#' and drops a backslash before any character
# (SchedMD/slurm src/common/parse_config.c, _strip_comments and _strip_escapes), so both are escaped. The password is
# never printed, logged or passed on a command line; the file is written 0600 by SlurmUser in one rename.
# Why the boot, not the renderer, writes StorageHost/StoragePort for Aurora: the boot must write StorageUser and
# StoragePass from RDS's secret in any case (neither may be in a rendered file or Pulumi state), so the whole
# connection is written in this one place; and the rendered files are the same for the controller, `gpuforge
# scheduler render` and `gpuforge plan`, rendered from the stack config and the controller's planned address,
# both known before anything exists, while the Aurora endpoint is known only once the cluster is made. The
# renderer's StorageHost=localhost is the local MariaDB's, which this rewrite leaves equal.
_SLURMDBD_CONF = r"""
write_slurmdbd_conf() {
    local tmp attempt
    tmp="$(mktemp "$SLURMDBD_CONF.XXXXXX")"
    for attempt in 1 2 3 4 5; do
        if "$GPUFORGE_PYTHON" - "$SLURMDBD_TEMPLATE" "$tmp" "$STORAGE_HOST" "$STORAGE_PORT" "$STORAGE_USER" \
            "$ACCOUNTING_SECRET" "$STORAGE_TLS_CA" <<'PYTHON'
import json
import os
import re
import sys

template, target, host, port, user, secret, tls_ca = sys.argv[1:8]
if tls_ca and not os.path.isfile(tls_ca):
    sys.exit(f"{tls_ca} is missing: slurmdbd cannot verify the database's TLS certificate without it")
if secret.startswith("arn:"):
    import boto3

    client = boto3.client("secretsmanager", region_name=secret.split(":")[3])
    value = json.loads(client.get_secret_value(SecretId=secret)["SecretString"])
    user, password = value["username"], value["password"]
else:
    with open(secret, encoding="ascii") as source:
        password = source.read().strip()
if not password or re.search(r'[\s"\x00-\x1f\x7f]', password):
    sys.exit("the database password is empty or holds a character slurmdbd.conf cannot carry")
escaped = password.replace("\\", "\\\\").replace("#", "\\#")
with open(template, encoding="utf-8") as source:
    kept = [
        line for line in source if not re.match(r"\s*Storage(Host|Port|User|Pass|Parameters)\s*=", line, re.I)
    ]
with open(target, "w", encoding="utf-8") as out:
    out.writelines(kept)
    out.write(f"StorageHost={host}\nStoragePort={port}\nStorageUser={user}\nStoragePass={escaped}\n")
    if tls_ca:
        out.write(f"StorageParameters=SSL_CA={tls_ca}\n")
PYTHON
        then
            chown "$SLURM_USER:$SLURM_USER" "$tmp"
            chmod 0600 "$tmp"
            mv -f "$tmp" "$SLURMDBD_CONF"
            return 0
        fi
        log "writing $SLURMDBD_CONF failed (attempt $attempt of 5)"
        sleep 10
    done
    rm -f "$tmp"
    return 1
}

start_slurmdbd() {
    systemctl daemon-reload
    systemctl enable --now slurmdbd.service
}
"""

# The local MariaDB: data and password on the state volume. The state folder becomes 0711 so that MariaDB's user can
# reach its own 0700 folder inside it; slurmctld's files there stay its own (0600). The password is made once, at the
# volume's first boot, root-only; every boot sets the database user to it, so the two never drift apart. The SQL goes
# through standard input (a here-document), never on a command line.
_LOCAL_MARIADB = r"""
setup_mariadb() {
    local password
    chmod 0711 "$STATE_DIR"
    install -d -m 0700 -o mysql -g mysql "$MARIADB_DIR"
    write_file "$MARIADB_CNF" <<CNF
# Written by gpuforge's user data: Slurm's accounting database on the controller's state volume, local only.
[mysqld]
datadir=$MARIADB_DIR
bind-address=127.0.0.1
CNF
    write_file "$MARIADB_DROP_IN" <<UNIT
# Written by gpuforge's user data: MariaDB's data lives on the state volume; never start without it.
[Unit]
RequiresMountsFor=$STATE_DIR
UNIT
    if [[ ! -d "$MARIADB_DIR/mysql" ]]; then
        mariadb-install-db --user=mysql --datadir="$MARIADB_DIR" --auth-root-authentication-method=socket \
            --skip-test-db >/dev/null
    fi
    if [[ ! -s "$ACCOUNTING_SECRET" ]]; then
        (
            umask 077
            "$GPUFORGE_PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$ACCOUNTING_SECRET.new"
        )
        mv -f "$ACCOUNTING_SECRET.new" "$ACCOUNTING_SECRET"
    fi
    chown root:root "$ACCOUNTING_SECRET"
    chmod 0600 "$ACCOUNTING_SECRET"
    systemctl daemon-reload
    systemctl enable mariadb.service
    systemctl restart mariadb.service
    password="$(<"$ACCOUNTING_SECRET")"
    # token_urlsafe's alphabet only: the value goes into an SQL string literal, where \ and ' are special.
    if [[ ! "$password" =~ ^[A-Za-z0-9_-]{32,}$ ]]; then
        log "$ACCOUNTING_SECRET does not hold a password this script made (32 or more of A-Z a-z 0-9 _ -)"
        return 1
    fi
    mariadb --protocol=socket <<SQL
CREATE DATABASE IF NOT EXISTS $STORAGE_LOC;
CREATE USER IF NOT EXISTS '$STORAGE_USER'@'localhost' IDENTIFIED BY '$password';
ALTER USER '$STORAGE_USER'@'localhost' IDENTIFIED BY '$password';
GRANT ALL ON $STORAGE_LOC.* TO '$STORAGE_USER'@'localhost';
SQL
}
"""


@dataclass(frozen=True)
class Accounting:
    """Where slurmdbd keeps Slurm's accounting: plain values (resolve Outputs first).

    `local`: MariaDB on the controller's state volume, on this host. `aurora`: the cluster endpoint `host`:`port`
    of components.accounting_db and `secret_arn`, the secret RDS keeps the master user's name and password in.
    """

    database: Literal["local", "aurora"]
    host: str = "localhost"
    port: int = 3306
    secret_arn: str | None = None

    def __post_init__(self) -> None:
        if (self.database == "aurora") != (self.secret_arn is not None):
            raise ValueError("Accounting: a secret ARN is given with database aurora, and only then")
        if not _HOST.fullmatch(self.host):
            raise ValueError(f"Accounting.host = {self.host!r} is not a host name")


def _accounting(accounting: Accounting, state_dir: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(variables, sections, steps before slurmctld) of slurmdbd and, with `local`, its MariaDB."""
    local = accounting.database == "local"
    variables = {
        "SLURMDBD_TEMPLATE": SLURMDBD_TEMPLATE,
        "SLURMDBD_CONF": f"{SLURM_ETC}/{SLURMDBD_CONF_NAME}",
        "STORAGE_HOST": accounting.host,
        "STORAGE_PORT": str(accounting.port),
        # The master user's name comes from the secret with aurora; this one is the local database's.
        "STORAGE_USER": LOCAL_STORAGE_USER,
        "ACCOUNTING_SECRET": (
            f"{state_dir}/{ACCOUNTING_PASSWORD_NAME}" if local else str(accounting.secret_arn)
        ),
        # TLS to Aurora, its certificate chain verified against RDS's CAs (not its host name: _slurmdbd_conf in
        # gpuforge/scheduler/render.py says why); the local MariaDB is reached on this host only.
        "STORAGE_TLS_CA": "" if local else RDS_CA_BUNDLE,
    }
    sections = [_SLURMDBD_CONF]
    steps = ["step write_slurmdbd_conf", "step start_slurmdbd"]
    if local:
        variables |= {
            "MARIADB_DIR": f"{state_dir}/{MARIADB_SUBDIR}",
            "MARIADB_CNF": MARIADB_CNF,
            "MARIADB_DROP_IN": MARIADB_DROP_IN,
            "STORAGE_LOC": ACCOUNTING_DATABASE_NAME,
        }
        sections.append(_LOCAL_MARIADB)
        steps.insert(0, "step setup_mariadb")
    return variables, sections, steps


def _declarations(variables: Mapping[str, str]) -> str:
    """`readonly NAME='value'` lines; a value holding $ or ` is literal on purpose (file text, e.g. rules)."""
    return "".join(
        (
            "# shellcheck disable=SC2016 # literal text, not expanded on purpose\n"
            if re.search(r"[$`]", value)
            else ""
        )
        + f"readonly {name}={shlex.quote(value)}\n"
        for name, value in variables.items()
    )


def _main(steps: list[str]) -> str:
    return (
        "\nmain() {\n"
        + "".join(f"    {line}\n" for line in steps)
        + "    if ((${#FAILED_STEPS[@]})); then\n"
        + '        log "failed steps: ${FAILED_STEPS[*]}"\n'
        + "        return 1\n"
        + "    fi\n}\n\n"
        + 'main "$@"\n'
    )


def _slurm_key_variables(key_secret_arn: str, slurm_user: str) -> dict[str, str]:
    return {
        "GPUFORGE_PYTHON": GPUFORGE_PYTHON,
        "SLURM_KEY_FILE": SLURM_KEY_FILE,
        "SLURM_KEY_SECRET_ARN": key_secret_arn,
        "SLURM_USER": slurm_user,
    }


def _slurm_join(join: SlurmJoin) -> dict[str, str]:
    for name, value in (("conf_server", join.conf_server), ("registration", join.registration)):
        if not _PLAIN_OPTION.fullmatch(value):
            raise ValueError(f"SlurmJoin.{name} = {value!r} holds characters slurmd's options cannot carry")
    return {
        **_slurm_key_variables(join.key_secret_arn, join.slurm_user),
        "NODE_CHECK_PASSED": NODE_CHECK_PASSED,
        "SLURM_CONF_SERVER": join.conf_server,
        "SLURM_NODE_CONF": join.registration,
        "SLURMD_DEFAULTS": SLURMD_DEFAULTS,
        "SLURM_LEAVE_UNIT": SLURM_LEAVE_UNIT,
        "SCONTROL": SCONTROL,
    }


def render(params: UserDataParams) -> str:
    """The user-data script for `params`, ready for base64 encoding into a launch template."""
    if params.scratch_disks < 0:
        raise ValueError(f"scratch_disks is a count, got {params.scratch_disks}")
    variables = {"LOG_TAG": "gpuforge-node-setup", "PER_BOOT_COPY": PER_BOOT_COPY}
    sections = [_COMMON]
    steps = []
    if params.scratch_disks:
        variables |= {
            "SCRATCH_DISKS": str(params.scratch_disks),
            "SCRATCH_MOUNT": SCRATCH_MOUNT,
            "SCRATCH_LABEL": SCRATCH_LABEL,
        }
        sections.append(_SCRATCH)
        steps.append("step setup_scratch")
    else:
        steps.append(f"# {params.instance_type} has no instance store: no {SCRATCH_MOUNT}")
    if params.fsx is not None:
        variables |= {
            "FSX_DNS_NAME": params.fsx.dns_name,
            "FSX_MOUNT_NAME": params.fsx.mount_name,
            "FSX_MOUNT": FSX_MOUNT,
            "FSX_FSTAB_OPTIONS": FSX_FSTAB_OPTIONS,
        }
        sections.append(_FSX)
        steps.append("step mount_fsx")
    variables |= {
        "NODE_CHECK_ENV": NODE_CHECK_ENV,
        "NODE_CHECK_DONE": NODE_CHECK_DONE,
        "NODE_CHECK_ARGS": params.node_check_args,
    }
    sections.append(_NODE_CHECK)
    steps += ["step write_node_check_env", "step run_node_check"]
    if params.slurm is not None:
        variables |= _slurm_join(params.slurm)
        sections += [_WRITE_FILE, _SLURM_KEY, _SLURMD]
        steps.append("step join_slurm")
    header = _HEADER.format(cluster=params.cluster, instance_type=params.instance_type)
    return (
        header
        + "\n"
        + _declarations(variables)
        + "".join(sections)
        + _main(["step install_per_boot", *steps])
    )


@dataclass(frozen=True)
class ControllerParams:
    """What the Slurm controller's script needs; all plain values (resolve Outputs first).

    `files` are the rendered Slurm files by name (`gpuforge.scheduler.render.render_files`),
    written to /etc/slurm; `host` and `address` are the SlurmctldHost name and address
    the files name; `state_volume_id` is the EBS volume mounted at `state_dir`.
    """

    cluster: str
    host: str
    address: str
    state_volume_id: str
    state_dir: str
    key_secret_arn: str
    files: Mapping[str, str] = field(default_factory=dict)
    slurm_user: str = "slurm"
    # (instance type of the GPU nodes, region) when the cluster uses topology/tree: the
    # controller then runs `gpuforge scheduler sync-topology` every minute.
    topology_sync: tuple[str, str] | None = None
    # Whether the controller runs gpuforge's drain receiver for Alertmanager (drainOnAlert).
    alert_receiver: bool = False
    # `gpuforge monitoring render`'s controller files by relative path (prometheus.yml, prometheus.flags,
    # alertmanager.yml, rules/*.yml), written to MONITORING_ETC; empty: no Prometheus, no Alertmanager.
    monitoring_files: Mapping[str, str] = field(default_factory=dict)
    # slurmdbd and its database (`Accounting`); None: no accounting (slurm.conf then names no slurmdbd).
    accounting: Accounting | None = None


def _file_variable(name: str) -> str:
    """The shell variable that holds a file's text: slurm.conf -> SLURM_CONF_TEXT."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper()) + "_TEXT"


def _monitoring(files: Mapping[str, str]) -> tuple[dict[str, str], str] | None:
    """(variables, write_monitoring_files function) for the monitoring files; None without any.

    Each file is 0644 and each folder 0755 (`write_file`), under MONITORING_ETC; a name that is
    not a plain relative path is refused, so no file lands outside the folder.
    """
    if not files:
        return None
    for name in files:
        if not _MONITORING_PATH.fullmatch(name):
            raise ValueError(f"monitoring file {name!r} is not a plain relative path (e.g. rules/alerts.yml)")
    variables = {
        "MONITORING_ETC": MONITORING_ETC,
        **{"MONITORING_" + _file_variable(name): text for name, text in sorted(files.items())},
    }
    writes = "".join(
        f'    printf \'%s\' "$MONITORING_{_file_variable(name)}" | write_file "$MONITORING_ETC/{name}"\n'
        for name in sorted(files)
    )
    units = " ".join(shlex.quote(unit) for unit in MONITORING_UNITS)
    section = (
        f"\nreadonly MONITORING_UNITS=({units})\n\nwrite_monitoring_files() {{\n{writes}}}\n"
        '\nstart_monitoring() {\n    systemctl enable --now "${MONITORING_UNITS[@]}"\n}\n'
    )
    return variables, section


def render_controller(params: ControllerParams) -> str:
    """The controller's user-data script: hostname, state volume, /etc/slurm, the key, slurmctld.

    slurmctld starts only when every step before it succeeded: a controller without its
    state volume, its files or its key would start with an empty queue or refuse every node.
    """
    if not params.files:
        raise ValueError("ControllerParams.files is empty: the controller needs the rendered Slurm files")
    variables = {
        "LOG_TAG": "gpuforge-slurmctld-setup",
        "PER_BOOT_COPY": CONTROLLER_PER_BOOT_COPY,
        "SLURMCTLD_HOST": params.host,
        "SLURMCTLD_ADDR": params.address,
        "CLOUD_INIT_HOSTNAME_CFG": CLOUD_INIT_HOSTNAME_CFG,
        "STATE_VOLUME_ID": params.state_volume_id,
        "STATE_VOLUME_WAIT_S": str(STATE_VOLUME_WAIT_S),
        "STATE_DIR": params.state_dir,
        "STATE_LABEL": STATE_LABEL,
        "SLURM_ETC": SLURM_ETC,
        "SLURMCTLD_DROP_IN": SLURMCTLD_DROP_IN,
        **_slurm_key_variables(params.key_secret_arn, params.slurm_user),
    }
    if params.topology_sync is not None:
        instance_type, region = params.topology_sync
        variables |= {
            "TOPOLOGY_ENV": TOPOLOGY_ENV,
            "TOPOLOGY_TIMER": TOPOLOGY_TIMER,
            "TOPOLOGY_CLUSTER": params.cluster,
            "TOPOLOGY_INSTANCE_TYPE": instance_type,
            "TOPOLOGY_REGION": region,
        }
    if params.alert_receiver:
        variables["ALERT_RECEIVER_UNIT"] = ALERT_RECEIVER_UNIT
    variables |= {_file_variable(name): text for name, text in sorted(params.files.items())}
    # slurmdbd.conf is kept as rendered (no password) and written for slurmdbd by write_slurmdbd_conf.
    writes = "".join(
        f"    printf '%s' \"${_file_variable(name)}\" | write_file "
        + ('"$SLURMDBD_TEMPLATE"' if name == SLURMDBD_CONF_NAME else f'"$SLURM_ETC/{name}"')
        + "\n"
        for name in sorted(params.files)
    )
    sections = [_COMMON, _WRITE_FILE, _CONTROLLER, _SLURM_KEY, f"\nwrite_slurm_files() {{\n{writes}}}\n"]
    accounting_steps: list[str] = []
    if params.accounting is not None:
        if SLURMDBD_CONF_NAME not in params.files:
            raise ValueError(
                f"ControllerParams.files has no {SLURMDBD_CONF_NAME}: slurmdbd cannot be configured"
            )
        accounting_variables, accounting_sections, accounting_steps = _accounting(
            params.accounting, params.state_dir
        )
        variables |= accounting_variables
        sections += accounting_sections
    elif SLURMDBD_CONF_NAME in params.files or ACCOUNTS_FILE_NAME in params.files:
        raise ValueError(
            f"ControllerParams.files has {SLURMDBD_CONF_NAME} or {ACCOUNTS_FILE_NAME} but no accounting database "
            "is given"
        )
    sync_accounts = params.accounting is not None and ACCOUNTS_FILE_NAME in params.files
    if sync_accounts:
        variables["SYNC_ACCOUNTS_UNIT"] = SYNC_ACCOUNTS_UNIT
    variables["SLURMCTLD_ORDER"] = (
        "Wants=slurmdbd.service\nAfter=slurmdbd.service" if params.accounting is not None else ""
    )
    monitoring = _monitoring(params.monitoring_files)
    if monitoring is not None:
        monitoring_variables, monitoring_section = monitoring
        variables |= monitoring_variables
        sections.append(monitoring_section)
    steps = [
        "step install_per_boot",
        "step set_hostname",
        "step mount_state",
        "step write_slurm_files",
        "step fetch_slurm_key",
        *(["step write_monitoring_files"] if monitoring is not None else []),
        # The database and slurmdbd.conf before slurmctld's gate; slurmdbd started before slurmctld.
        *[line for line in accounting_steps if line != "step start_slurmdbd"],
        "if ((${#FAILED_STEPS[@]} == 0)); then",
        *(["    step start_slurmdbd"] if accounting_steps else []),
        "    step start_slurmctld",
        *(["    step start_sync_accounts"] if sync_accounts else []),
        *(["    step start_topology_sync"] if params.topology_sync is not None else []),
        *(["    step start_monitoring"] if monitoring is not None else []),
        *(["    step start_alert_receiver"] if params.alert_receiver else []),
        "else",
        '    log "not starting slurmctld: ${FAILED_STEPS[*]} failed"',
        "fi",
    ]
    header = _CONTROLLER_HEADER.format(cluster=params.cluster)
    return header + "\n" + _declarations(variables) + "".join(sections) + _main(steps)
