"""Slurm's files for one gpuforge cluster, rendered in one place.

`render_files` writes slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf (without any
password: the controller adds it at boot), gpuforge-accounts.json (the teams, users and QOS
`gpuforge scheduler sync-accounts` applies) and, when the cluster has a network topology,
topology.conf. The controller serves them (configless mode), so a
change is one file on one host. `node_registration` is the node's own line: what a
GPU node passes to `slurmd -Z --conf` when it joins as a dynamic node. Both come from
the hardware catalog row of the cluster's instance type, so the CPUs, memory, GPUs and
their NUMA cores Slurm is told are the ones the catalog holds, never typed by hand.

Every setting that depends on the Slurm version is gated on the pinned version through
`gpuforge.scheduler.versions.require`, which stops with the setting, the version that
introduced it and its source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal

from packaging.version import Version

from gpuforge import hardware
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.scheduler import gpu_share, slurm_values, versions
from gpuforge.scheduler.topology import NetworkTopology

if TYPE_CHECKING:
    # Types only: importing gpuforge.components loads Pulumi, which the controller and the
    # nodes, where these files are also rendered, do not have.
    from gpuforge.components.specs import CapacityType, PartitionSpec, SchedulerSpec
    from gpuforge.rendered_set import Recognise

# The name of the one topology a gpuforge cluster has (topology.yaml's default name; a
# dynamic node joins it with --conf "Topology=default:<leaf switch>").
TOPOLOGY_NAME = "default"
# Nodes are put into partitions through this nodeset, which selects them by feature: a
# dynamic node's name is not known before it boots. Source:
# https://slurm.schedmd.com/dynamic_nodes.html (partitions and nodesets with Feature=).
NODESET = slurm_values.NODESET
# Slurm kills the HealthCheckProgram after this long (its default HealthCheckTimeout).
# Source: https://slurm.schedmd.com/slurm.conf.html#OPT_HealthCheckProgram
HEALTH_CHECK_TIMEOUT_S = 60

ConfigFile = Literal[
    "slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", "slurmdbd.conf", "gpuforge-accounts.json"
]
# The desired accounts, users and QOS (gpuforge.scheduler.accounts), beside slurm.conf on the controller.
ACCOUNTS_FILE: Literal["gpuforge-accounts.json"] = "gpuforge-accounts.json"
# A QOS's priority counts this much in a job's priority (PriorityWeightQOS x the QOS's normalised priority,
# https://slurm.schedmd.com/priority_multifactor.html): above every other factor, which gpuforge leaves at 0,
# so a production job always starts before a research job. The same weight AWS ParallelCluster's docs and
# Slurm's own examples use for a dominant factor.
PRIORITY_WEIGHT_QOS = 10000
# The RDS CA bundle slurmdbd verifies Aurora's certificate with (accounting.database: aurora): Aurora's server
# certificates chain to Amazon RDS's own CAs, which no OS trust store holds
# (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/UsingWithRDS.SSL.html). The controller's boot
# (components/user_data.py) checks and names the same file.
RDS_CA_BUNDLE = "/etc/gpuforge/rds-ca-bundle.pem"
# The node's registration line as `gpuforge scheduler render` writes it beside the config files.
REGISTRATION_FILE = "slurmd-register.conf"


@dataclass(frozen=True)
class SlurmSite:
    """Where the daemons of a cluster live: hosts, ports and paths, not policy.

    The defaults are the image's layout (images/scripts/45-slurm.sh). Tests that run
    real daemons on one machine give their own paths and ports; everything else in the
    rendered files is the same for them as for a real cluster.
    """

    controller_host: str
    controller_addr: str
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    srun_port_range: tuple[int, int] = (60001, 63000)
    slurm_user: str = "slurm"
    state_dir: str = "/var/spool/slurmctld"
    spool_dir: str = "/var/spool/slurmd"
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run"
    gpu_device_prefix: str = "/dev/nvidia"
    health_check_program: str = "/usr/local/sbin/gpuforge-slurm-healthcheck"
    health_check_interval_s: int = 300
    # slurmd's Prolog and Epilog: dcgm-exporter's job mapping files (gpuforge.node.job_mapping).
    # Wrappers the image installs (images/scripts/85-gpuforge.sh); they always exit 0, because a
    # failing prolog drains the node (slurm.conf(5), Prolog).
    prolog: str = "/usr/local/sbin/gpuforge-slurm-prolog"
    epilog: str = "/usr/local/sbin/gpuforge-slurm-epilog"
    # slurmdbd on the controller (slurm.conf AccountingStoragePort, slurmdbd.conf DbdPort; 6819 is the default
    # of both, https://slurm.schedmd.com/slurmdbd.conf.html#OPT_DbdPort).
    slurmdbd_port: int = 6819
    # slurmdbd's database: the local MariaDB, or the Aurora endpoint when the caller knows it (the controller's
    # boot writes the connection it has into slurmdbd.conf either way, components/user_data.py).
    storage_host: str = "localhost"
    storage_port: int = 3306
    storage_user: str = "slurm"
    storage_loc: str = "slurm_acct_db"  # StorageLoc's default (slurmdbd.conf(5))
    # The RDS CA bundle slurmdbd verifies Aurora's certificate with (accounting.database: aurora).
    storage_tls_ca: str = RDS_CA_BUNDLE

    def __post_init__(self) -> None:
        slurm_values.HOST_NAME.check(self.controller_host, field="SlurmSite.controller_host")
        slurm_values.check_address(self.controller_addr, field="SlurmSite.controller_addr")
        slurm_values.DNS_NAME.check(self.storage_host, field="SlurmSite.storage_host")
        slurm_values.DATABASE_NAME.check(self.storage_user, field="SlurmSite.storage_user")
        slurm_values.DATABASE_NAME.check(self.storage_loc, field="SlurmSite.storage_loc")
        for port_field in ("slurmctld_port", "slurmd_port", "slurmdbd_port", "storage_port"):
            slurm_values.check_port(getattr(self, port_field), field=f"SlurmSite.{port_field}")
        low, high = self.srun_port_range
        slurm_values.check_port(low, field="SlurmSite.srun_port_range")
        if slurm_values.check_port(high, field="SlurmSite.srun_port_range") < low:
            raise InputError(
                f"SlurmSite.srun_port_range = {self.srun_port_range}: the first port is above the last. "
                "Fix: give (first, last), e.g. (60001, 63000)."
            )
        slurm_values.USER_NAME.check(self.slurm_user, field="SlurmSite.slurm_user")
        for path_field in (
            "state_dir",
            "spool_dir",
            "log_dir",
            "run_dir",
            "gpu_device_prefix",
            "health_check_program",
            "prolog",
            "epilog",
            "storage_tls_ca",
        ):
            slurm_values.PATH.check(getattr(self, path_field), field=f"SlurmSite.{path_field}")
        # slurmd 26.05.5 refuses to start with "HealthCheckTimeout (60) must be less than
        # HealthCheckInterval" (seen running the rendered config in tests/scheduler).
        if self.health_check_interval_s <= HEALTH_CHECK_TIMEOUT_S:
            raise InputError(
                f"health_check_interval_s = {self.health_check_interval_s}: slurmd needs HealthCheckInterval "
                f"above HealthCheckTimeout ({HEALTH_CHECK_TIMEOUT_S} s, the time Slurm gives the health check). "
                f"Fix: use more than {HEALTH_CHECK_TIMEOUT_S} seconds (gpuforge's default is 300)."
            )


@dataclass(frozen=True)
class SlurmCluster:
    """One cluster as Slurm sees it: what the stack config and the catalog say about it."""

    name: str
    instance_type: hardware.InstanceType
    capacity_type: CapacityType
    max_nodes: int
    scheduler: SchedulerSpec
    slurm_version: str  # the matrix's exact pin, e.g. "26.05.5"
    site: SlurmSite
    topology: NetworkTopology | None = None

    def __post_init__(self) -> None:
        """Refuse any value Slurm would read differently from what it says, before a file is rendered.

        Each rule is gpuforge.scheduler.slurm_values', the same the stack config and the
        components use, so a value that passes there is never refused here and a value built
        in code cannot skip them.
        """
        slurm_values.CLUSTER_NAME.check(self.name, field="cluster name (SlurmCluster.name)")
        slurm_values.SLURM_VERSION.check(self.slurm_version, field="SlurmCluster.slurm_version")
        if isinstance(self.max_nodes, bool) or not isinstance(self.max_nodes, int) or self.max_nodes < 1:
            raise InputError(
                f"SlurmCluster.max_nodes = {cut(self.max_nodes)}: MaxNodeCount is a whole number "
                "of 1 or more. Fix: give the node group's largest size."
            )
        slurm_values.GRES_TYPE.check(
            self.gpu_type, field=f"GPU model {self.instance_type.gpu_model!r} of {self.instance_type.name}"
        )
        gpu_share.gpu_share(self.instance_type)  # a type Slurm cannot share by GPU is refused here
        for feature in self.features:
            slurm_values.FEATURE.check(feature, field="SlurmCluster.features")
        for partition in self.scheduler.effective_partitions:
            slurm_values.PARTITION_NAME.check(partition.name, field="scheduler.partitions.name")
            if partition.max_time is not None:
                slurm_values.MAX_TIME.check(
                    partition.max_time, field=f"scheduler.partitions[{partition.name}].maxTime"
                )
        for level in self.scheduler.qos:
            for name in (level.name, *level.preempts):
                slurm_values.QOS_NAME.check(name, field="scheduler.qos.name")
        for team in self.scheduler.teams:
            slurm_values.ACCOUNT_NAME.check(team.name, field="scheduler.teams.name")
            for user in team.users:
                slurm_values.USER_NAME.check(user.name, field=f"scheduler.teams[{team.name}].users.name")
        if self.topology is not None:
            for switch in sorted(
                {*self.topology.children, *(s for below in self.topology.children.values() for s in below)}
            ):
                slurm_values.SWITCH_NAME.check(switch, field="topology switch name")

    @property
    def version(self) -> Version:
        return versions.parse_version(self.slurm_version, where="slurm.version")

    @property
    def gpu_type(self) -> str:
        """The GRES type name of the cluster's GPUs: the catalog's model in lower case (h100, b200)."""
        return self.instance_type.gpu_model.lower()

    @property
    def features(self) -> tuple[str, ...]:
        """The features every node registers with: instance type, capacity type, GPU model."""
        return (self.instance_type.name, self.capacity_type, self.gpu_type)

    @property
    def real_memory_mib(self) -> int:
        return self.share.real_memory_mib

    @property
    def share(self) -> gpu_share.GpuShare:
        """Each GPU's share of the node's cores and memory (gpuforge.scheduler.gpu_share)."""
        return gpu_share.gpu_share(self.instance_type)

    @property
    def uses_features(self) -> tuple[str, ...]:
        """The version-dependent features the rendered files need (see gpuforge/data/slurm.yaml)."""
        extra = versions.TOPOLOGY_FEATURES if self.topology is not None else ()
        return versions.RENDERED_FEATURES + extra


def _lines(pairs: list[tuple[str, object]]) -> str:
    return "".join(f"{key}={value}\n" for key, value in pairs)


def _header(cluster: SlurmCluster, what: str) -> str:
    return (
        f"# {what} for cluster {cluster.name}, rendered by gpuforge for Slurm {cluster.slurm_version}.\n"
        "# Do not edit by hand: change the stack config and render again "
        "(gpuforge scheduler render).\n"
    )


RENDERED_NAMES = (
    "slurm.conf",
    "gres.conf",
    "cgroup.conf",
    "topology.conf",
    "slurmdbd.conf",
    ACCOUNTS_FILE,
    REGISTRATION_FILE,
)
# The first line `_header` writes: which file, for which cluster. JSON has no comments: the accounts
# file's first line is a "comment" key holding the same text.
_JSON_COMMENT = '{"comment": "'
_HEADER = re.compile(
    r"# (?P<file>[a-z.-]+) for cluster (?P<cluster>[a-z0-9-]+), rendered by gpuforge for Slurm "
)


def rendered_for(cluster: str) -> Recognise:
    """How `gpuforge scheduler render --out` recognises a file it rendered for `cluster`
    (gpuforge.rendered_set): a name of the set, whose first line `_header` wrote for that cluster."""

    def recognise(relative: PurePosixPath, first_line: str) -> bool:
        match = _HEADER.match(first_line.removeprefix(_JSON_COMMENT))
        return (
            str(relative) in RENDERED_NAMES
            and match is not None
            and match["file"] == relative.name
            and match["cluster"] == cluster
        )

    return recognise


def _partition_line(partition: PartitionSpec) -> str:
    fields = [
        f"PartitionName={partition.name}",
        f"Nodes={NODESET}",
        f"Default={'YES' if partition.default else 'NO'}",
        f"MaxTime={partition.max_time or 'INFINITE'}",
        "State=UP",
    ]
    return " ".join(fields) + "\n"


def _slurm_conf(cluster: SlurmCluster) -> str:
    site = cluster.site
    low, high = site.srun_port_range
    settings: list[tuple[str, object]] = [
        ("ClusterName", cluster.name),
        ("SlurmctldHost", f"{site.controller_host}({site.controller_addr})"),
        ("SlurmUser", site.slurm_user),
        ("SlurmctldPort", site.slurmctld_port),
        ("SlurmdPort", site.slurmd_port),
        ("SrunPortRange", f"{low}-{high}"),
        # auth/slurm: one shared key (/etc/slurm/slurm.key), no munge daemon to run.
        ("AuthType", "auth/slurm"),
        ("CredType", "cred/slurm"),
        # Configless: slurmd and the client commands fetch these files from slurmctld.
        ("SlurmctldParameters", "enable_configless"),
        ("StateSaveLocation", site.state_dir),
        ("SlurmdSpoolDir", f"{site.spool_dir}/%n"),
        ("SlurmctldPidFile", f"{site.run_dir}/slurmctld.pid"),
        ("SlurmdPidFile", f"{site.run_dir}/slurmd-%n.pid"),
        ("SlurmctldLogFile", f"{site.log_dir}/slurmctld.log"),
        ("SlurmdLogFile", f"{site.log_dir}/slurmd-%n.log"),
        # GPUs as generic resources, cores and memory as consumable resources.
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        # Each GPU a job asks for brings its share of the node's cores and RealMemory when the job names no
        # CPUs or memory (gpuforge.scheduler.gpu_share): without them a 1-GPU job took the whole node's memory.
        # Cluster-wide, as every partition draws from the one nodeset of one instance type.
        ("DefCpuPerGPU", cluster.share.cpus_per_gpu),
        ("DefMemPerGPU", cluster.share.memory_per_gpu_mib),
        ("GresTypes", "gpu"),
        ("ProctrackType", "proctrack/cgroup"),
        ("TaskPlugin", "task/cgroup,task/affinity"),
        # Nodes join by themselves (slurmd -Z); this bounds how many may.
        ("MaxNodeCount", cluster.max_nodes),
        # A node that was DOWN for not responding returns when it registers again; a node
        # drained by the health check stays drained until it is replaced or resumed.
        ("ReturnToService", 2),
        ("HealthCheckProgram", site.health_check_program),
        ("HealthCheckInterval", site.health_check_interval_s),
        ("HealthCheckNodeState", "ANY"),
        # Absolute paths: slurmd runs the node's own copies (configless mode pushes only scripts
        # named without a path, slurm.conf(5) SlurmctldParameters=enable_configless).
        ("Prolog", site.prolog),
        ("Epilog", site.epilog),
    ]
    settings += _accounting_settings(cluster)
    if cluster.topology is not None:
        settings.append(("TopologyPlugin", "topology/tree"))
    if versions.has("openmetrics", cluster.version):
        # slurmctld serves /metrics/* on its own port, scraped by the controller's Prometheus.
        settings.append(("MetricsType", "metrics/openmetrics"))
    body = _lines(settings)
    body += f"NodeSet={NODESET} Feature={cluster.instance_type.name}\n"
    body += "".join(_partition_line(partition) for partition in cluster.scheduler.effective_partitions)
    return _header(cluster, "slurm.conf") + body


def _accounting_settings(cluster: SlurmCluster) -> list[tuple[str, object]]:
    """slurm.conf's accounting, priority and preemption: always on for a Slurm cluster.

    Sources: https://slurm.schedmd.com/slurm.conf.html (each key's entry), https://slurm.schedmd.com/accounting.html,
    https://slurm.schedmd.com/preempt.html.
    """
    site = cluster.site
    settings: list[tuple[str, object]] = [
        # Jobs, steps and node events go to slurmdbd on the controller (slurm.conf AccountingStorageType).
        ("AccountingStorageType", "accounting_storage/slurmdbd"),
        ("AccountingStorageHost", site.controller_host),
        ("AccountingStoragePort", site.slurmdbd_port),
        # GPUs counted as a TRES, so sacct's AllocTRES and sreport -T gres/gpu show GPU-hours and
        # GrpTRES=gres/gpu=N can limit them (AccountingStorageTRES).
        ("AccountingStorageTRES", "gres/gpu"),
        # A job of a user or account with no association is refused; GrpTRES and QOS limits are enforced;
        # `safe` starts a job only if it can finish within its limits (AccountingStorageEnforce).
        ("AccountingStorageEnforce", "associations,limits,qos,safe"),
        # Job usage (CPU, memory) read from the job's cgroup, as proctrack/cgroup tracks it (JobAcctGatherType).
        ("JobAcctGatherType", "jobacct_gather/cgroup"),
        # A job's priority from its QOS (PriorityType, PriorityWeightQOS; priority_multifactor.html).
        ("PriorityType", "priority/multifactor"),
        ("PriorityWeightQOS", PRIORITY_WEIGHT_QOS),
    ]
    if any(level.preempts for level in cluster.scheduler.qos):
        # A QOS preempts the QOS its Preempt= lists (sacctmgr); a preempted job is requeued, never cancelled
        # (PreemptType=preempt/qos, PreemptMode=REQUEUE; preempt.html).
        settings += [("PreemptType", "preempt/qos"), ("PreemptMode", "REQUEUE")]
    return settings


def _slurmdbd_conf(cluster: SlurmCluster) -> str:
    """slurmdbd.conf without StoragePass: the controller adds the password at boot from a root-only file on the
    state volume or from RDS's secret, so no rendered file, Pulumi state or user data holds it.

    Source: https://slurm.schedmd.com/slurmdbd.conf.html (Slurm 26.05; the same text as the test root's
    slurmdbd.conf(5)).
    """
    site = cluster.site
    settings: list[tuple[str, object]] = [
        ("AuthType", "auth/slurm"),  # the same shared key as slurmctld (slurm.conf AuthType)
        ("DbdHost", site.controller_host),
        ("DbdPort", site.slurmdbd_port),
        ("SlurmUser", site.slurm_user),
        ("LogFile", f"{site.log_dir}/slurmdbd.log"),
        # slurmdbd.service's RuntimeDirectory=slurmdbd (Slurm's own unit) makes /run/slurmdbd for SlurmUser.
        ("PidFile", f"{site.run_dir}/slurmdbd/slurmdbd.pid"),
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", site.storage_host),
        ("StoragePort", site.storage_port),
        ("StorageUser", site.storage_user),
        ("StorageLoc", site.storage_loc),
    ]
    if cluster.scheduler.accounting.database == "aurora":
        # TLS to Aurora: StorageParameters=SSL_CA=<file> ("The path name of the Certificate Authority (CA)
        # certificate file", slurmdbd.conf(5) of Slurm 26.05); the cluster's parameter group sets
        # require_secure_transport=ON, so a connection without TLS is refused by the server too. What is checked is
        # the certificate chain, not the host name: Slurm passes SSL_CA to mysql_ssl_set() only and has no option
        # for MYSQL_OPT_SSL_VERIFY_SERVER_CERT (SchedMD/slurm src/database/mysql_common.c, _set_mysql_ssl_opts, at
        # tag slurm-26-05-3-1 and branch slurm-26.05 531c4b2ea9b8); MariaDB Connector/C with OpenSSL (Ubuntu
        # 22.04's libmariadb3 1:10.6.23 depends on libssl3) then sets SSL_VERIFY_PEER and refuses a chain that
        # does not reach the bundle, but runs X509_check_host only when that option is set
        # (mariadb-corporation/mariadb-connector-c libmariadb/secure/openssl.c and ma_pvio.c at tags v3.1.24,
        # v3.2.7 and v3.3.11). So any certificate an RDS CA signed is accepted: that the peer is this cluster's
        # writer rests on the VPC's own DNS resolver and routing.
        settings.append(("StorageParameters", f"SSL_CA={site.storage_tls_ca}"))
    return _header(cluster, "slurmdbd.conf") + _lines(settings)


def accounts_document(cluster: SlurmCluster) -> dict[str, object]:
    """The desired accounts, users and QOS of `cluster` (gpuforge.scheduler.accounts reads it back)."""
    from gpuforge.scheduler.accounts import desired_state

    return desired_state(cluster.name, cluster.scheduler).to_json()


def _accounts_file(cluster: SlurmCluster) -> str:
    comment = _header(cluster, ACCOUNTS_FILE).replace("\n", " ").strip()
    body = json.dumps(accounts_document(cluster), indent=2, sort_keys=True)
    # The comment key first and on the first line, so `rendered_for` recognises the file like the others.
    return _JSON_COMMENT + comment.replace('"', "'") + '",\n' + body.removeprefix("{\n") + "\n"


def _gres_conf(cluster: SlurmCluster) -> str:
    """One explicit line per GPU, bound to its NUMA node's cores.

    gres.conf(5): AutoDetect cannot be used with cloud (dynamic) nodes, so every device
    file is named; Cores= makes task/affinity and --gres-flags place a job's CPUs next to
    its GPUs. Source: https://slurm.schedmd.com/gres.conf.html
    """
    instance = cluster.instance_type
    lines = ["AutoDetect=off\n"]
    for gpu in range(instance.gpu_count):
        cores = instance.numa_cores(instance.gpu_numa_node(gpu))
        lines.append(
            f"Name=gpu Type={cluster.gpu_type} File={cluster.site.gpu_device_prefix}{gpu} "
            f"Cores={cores.start}-{cores.stop - 1}\n"
        )
    return _header(cluster, "gres.conf") + "".join(lines)


def _cgroup_conf(cluster: SlurmCluster) -> str:
    settings: list[tuple[str, object]] = [
        ("CgroupPlugin", "autodetect"),
        ("ConstrainCores", "yes"),
        # A job sees only the GPU device files it was given.
        ("ConstrainDevices", "yes"),
        ("ConstrainRAMSpace", "yes"),
    ]
    return _header(cluster, "cgroup.conf") + _lines(settings)


def render_files(cluster: SlurmCluster) -> dict[ConfigFile, str]:
    """Every file Slurm reads for `cluster`, by name; InputError if the version lacks a setting."""
    versions.require(cluster.uses_features, cluster.version, what=f"the config of cluster {cluster.name}")
    if cluster.topology is not None and not cluster.topology.children:
        # slurmctld 26.05.5: "fatal: No switches configured, failed to create context for
        # topology plugin" (seen running the rendered config in tests/scheduler).
        raise InputError(
            f"cluster {cluster.name}: a network topology with no switches stops slurmctld. Fix: give the "
            f"topology response of running instances or a reservation, or start from "
            f"NetworkTopology.pending({cluster.name!r}), which holds one switch for unplaced nodes."
        )
    files: dict[ConfigFile, str] = {
        "slurm.conf": _slurm_conf(cluster),
        "gres.conf": _gres_conf(cluster),
        "cgroup.conf": _cgroup_conf(cluster),
        "slurmdbd.conf": _slurmdbd_conf(cluster),
        ACCOUNTS_FILE: _accounts_file(cluster),
    }
    if cluster.topology is not None:
        files["topology.conf"] = _header(cluster, "topology.conf") + cluster.topology.topology_conf()
    return files


def node_registration(cluster: SlurmCluster) -> str:
    """What a GPU node of `cluster` passes to `slurmd -Z --conf`: its hardware, GRES and features.

    A node that joins a topology appends `Topology=default:<its leaf switch>` at boot
    (`topology_argument`), because only the node knows which switch it sits under.
    """
    instance = cluster.instance_type
    fields = [
        f"CPUs={instance.vcpus}",
        "Boards=1",
        f"SocketsPerBoard={instance.sockets}",
        f"CoresPerSocket={instance.cores_per_socket}",
        f"ThreadsPerCore={instance.threads_per_core}",
        f"RealMemory={cluster.real_memory_mib}",
        f"Gres=gpu:{cluster.gpu_type}:{instance.gpu_count}",
        f"Feature={','.join(cluster.features)}",
    ]
    return " ".join(fields)


def registration_file(cluster: SlurmCluster) -> str:
    """`node_registration` as a file for `gpuforge scheduler render --out`: what each GPU node of
    `cluster` passes to `slurmd -Z --conf`, the same line its user data writes into /etc/default/slurmd,
    so the node definition Slurm receives can be read before any node boots."""
    topology = (
        f"# A node that joins the topology appends `Topology={TOPOLOGY_NAME}:<its leaf switch>` at boot.\n"
        if cluster.topology is not None
        else ""
    )
    return (
        _header(cluster, REGISTRATION_FILE)
        + "# What each GPU node passes to `slurmd -Z --conf` (its user data writes it into /etc/default/slurmd);\n"
        + "# Slurm does not read this file.\n"
        + topology
        + node_registration(cluster)
        + "\n"
    )


def topology_argument(leaf_switch: str) -> str:
    """The `--conf` field a dynamic node adds to join the tree under `leaf_switch` (Slurm 25.05+)."""
    slurm_values.SWITCH_NAME.check(leaf_switch, field="leaf switch")
    return f"Topology={TOPOLOGY_NAME}:{leaf_switch}"
