"""prometheus.yml and Prometheus's command-line flags for the Slurm controller.

Prometheus finds the GPU nodes by EC2 service discovery: the cluster's tag (`gpuforge:cluster`,
which components/cluster.py puts on every resource) and the GPU instance type (the controller
is a CPU type), as the controller's topology sync finds them (gpuforge.scheduler.sync). Each
target gets a `node` label, the instance id, which is the node's Slurm name (`slurmd -N
<instance id>`, components/user_data.py): what the drain receiver drains.

EFA counters reach Prometheus through node_exporter (:9100): gpuforge's collector
(`gpuforge node efa-metrics`, gpuforge/node/efa_metrics.py) writes them as `gpuforge_efa_*` series
for node_exporter's textfile collector.
slurmctld's own metrics are scraped only where the rendered slurm.conf turns them on
(`MetricsType=metrics/openmetrics`): DESIGN.md checked Slurm 26.05.5 serving them at these
paths on its own port, and without the setting nothing answers there.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuforge.components.cluster import CLUSTER_TAG
from gpuforge.errors import InputError
from gpuforge.monitoring.config import DOC, KEY, MonitoringConfig, WorkspaceRef

DCGM_JOB = "gpuforge-dcgm"
NODE_JOB = "gpuforge-node"
SLURMCTLD_JOB = "gpuforge-slurmctld"
# dcgm-exporter listens on :9400 (its README and default --address); node_exporter on :9100
# (its default --web.listen-address); Alertmanager on :9093 (`prometheus-alertmanager --help`,
# --web.listen-address default), on the controller beside Prometheus.
DCGM_EXPORTER_PORT = 9400
NODE_EXPORTER_PORT = 9100
ALERTMANAGER = "127.0.0.1:9093"
SLURM_METRICS = "MetricsType=metrics/openmetrics"
SLURM_METRICS_PATHS = (
    "/metrics/nodes",
    "/metrics/jobs",
    "/metrics/partitions",
    "/metrics/scheduler",
    "/metrics/jobs-users-accts",
)
SCRAPE_INTERVAL_S = 15
SCRAPE_INTERVAL = f"{SCRAPE_INTERVAL_S}s"
RULE_FILES = "rules/*.yml"


def serves_slurm_metrics(slurm_conf: str) -> bool:
    """Whether slurmctld, with this slurm.conf, serves its OpenMetrics (a line of its own, not a comment)."""
    return any(line.strip().replace(" ", "") == SLURM_METRICS for line in slurm_conf.splitlines())


def _ec2_job(name: str, port: int, *, cluster: str, region: str, instance_type: str) -> dict[str, Any]:
    return {
        "job_name": name,
        "ec2_sd_configs": [
            {
                "region": region,
                "port": port,
                "filters": [
                    {"name": f"tag:{CLUSTER_TAG}", "values": [cluster]},
                    {"name": "instance-type", "values": [instance_type]},
                    {"name": "instance-state-name", "values": ["running"]},
                ],
            }
        ],
        "relabel_configs": [
            {"source_labels": ["__meta_ec2_instance_id"], "target_label": "node"},
            {"source_labels": ["__meta_ec2_availability_zone"], "target_label": "availability_zone"},
        ],
    }


def remote_write_url(workspace: WorkspaceRef) -> tuple[str, str]:
    """(URL, region) of an AMP workspace's remote-write endpoint
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-ingest-metrics-remote-write.html)."""
    _, partition, _, region, _, resource = workspace.workspace_arn.split(":", 5)
    domain = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    workspace_id = resource.split("/", 1)[1]
    return f"https://aps-workspaces.{region}.{domain}/workspaces/{workspace_id}/api/v1/remote_write", region


def prometheus_config(
    *,
    cluster: str,
    region: str,
    instance_type: str,
    monitoring: MonitoringConfig,
    slurmctld_port: int | None,
    workspace_arn: str | None = None,
    source: str = "gpuforge:monitoring",
) -> str:
    """prometheus.yml; `slurmctld_port` None: slurmctld serves no metrics (no scrape job).

    `workspace_arn` is the workspace MonitoringResources made for `remoteWrite: amp`
    (components/monitoring_resources.py): its ARN exists only once `pulumi up` made it, so it
    comes in here, never from the stack file. `source` names the stack file for errors.
    """
    workspace = _remote_write_target(monitoring, workspace_arn, source)
    jobs = [
        _ec2_job(DCGM_JOB, DCGM_EXPORTER_PORT, cluster=cluster, region=region, instance_type=instance_type),
        _ec2_job(NODE_JOB, NODE_EXPORTER_PORT, cluster=cluster, region=region, instance_type=instance_type),
    ]
    if slurmctld_port is not None:
        jobs.append(
            {
                "job_name": SLURMCTLD_JOB,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{slurmctld_port}"], "labels": {"__metrics_path__": path}}
                    for path in SLURM_METRICS_PATHS
                ],
            }
        )
    document: dict[str, Any] = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
            "external_labels": {"cluster": cluster},
        },
        "storage": {"tsdb": {"retention": {"time": f"{monitoring.retention_days}d"}}},
        "rule_files": [RULE_FILES],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [ALERTMANAGER]}]}]},
        "scrape_configs": jobs,
    }
    if workspace is not None:
        url, workspace_region = remote_write_url(workspace)
        document["remote_write"] = [{"url": url, "sigv4": {"region": workspace_region}}]
    header = f"# prometheus.yml for cluster {cluster}, rendered by gpuforge for Prometheus 3 (the release the image pins)\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=1000)


def _remote_write_target(
    monitoring: MonitoringConfig, workspace_arn: str | None, source: str
) -> WorkspaceRef | None:
    """The workspace Prometheus writes to: the stack's own, or the one made for `amp`; None: no remote write."""
    if isinstance(monitoring.remote_write, WorkspaceRef):
        if workspace_arn is not None:
            raise InputError(
                f"{source}: {KEY}.remoteWrite names workspace {monitoring.remote_write.workspace_arn}, and a made "
                f"workspace {workspace_arn} was given too. Fix: give the made workspace only for `remoteWrite: amp`."
            )
        return monitoring.remote_write
    if monitoring.remote_write == "amp":
        if workspace_arn is None:
            raise InputError(
                f"{source}: {KEY}.remoteWrite = 'amp': the workspace is made by MonitoringResources "
                "(components/monitoring_resources.py) at `pulumi up`, and its ARN was not given, so there is "
                "no URL to write to. Fix: render with the made workspace's ARN, or name an existing workspace "
                f"(`remoteWrite: {{workspaceArn: arn:aws:aps:...}}`) ({DOC})."
            )
        return WorkspaceRef(workspaceArn=workspace_arn)
    if workspace_arn is not None:
        raise InputError(
            f"{source}: {KEY}.remoteWrite = 'none', and a made workspace {workspace_arn} was given. "
            "Fix: set `remoteWrite: amp` to write to it."
        )
    return None


def prometheus_flags(*, cluster: str, resend_delay: str | None = None) -> str:
    """Flags for the controller's Prometheus, one a line. Retention is not one of them: it is prometheus.yml's
    `storage.tsdb.retention.time` (prometheus_config). Prometheus deprecated the flag
    `--storage.tsdb.retention.time` in 3.8 ("[DEPRECATED] ... use the storage.tsdb.retention.time field in the
    config file instead", prometheus/prometheus commit ad4b59c50461, #17026, first in v3.8.0), and so it reads
    in cmd/prometheus/main.go of 3.13 (tag v3.13.2, Go module v0.313.5); the file's value also applies on a
    config reload. Only an LTS series is accepted (monitoring.prometheus-supported), so every accepted
    Prometheus reads the field (3.5, which refuses it, ended support on 2026-07-31)."""
    flags = ["--web.listen-address=127.0.0.1:9090"]
    if resend_delay is not None:  # with a heartbeat: how soon a dead Prometheus's heartbeat ends
        flags.append(f"--rules.alert.resend-delay={resend_delay}")
    return (
        f"# prometheus.flags for cluster {cluster}, rendered by gpuforge: the controller's Prometheus runs with these\n"
        + "".join(f"{flag}\n" for flag in flags)
    )
