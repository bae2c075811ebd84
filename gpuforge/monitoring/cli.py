"""`gpuforge monitoring render STACK_DIR --stack NAME --out DIR`.

Writes the controller's metrics configuration for the stack's cluster: prometheus.yml,
prometheus.flags, alertmanager.yml, rules/gpuforge-alerts.yml, rules/gpuforge-usage.yml,
rules/gpuforge-heartbeat.yml (with `heartbeat` only), dcgm-exporter-fields.csv (the GPU nodes'
field list), dashboards/*.json (Grafana) and sizing.json (the series and memory estimate, also printed).
Every file is rendered in memory and DIR checked before the first is written; then each is
written atomically (gpuforge.atomic). DIR may be missing, empty, or hold only this render's
files for the same cluster (each names its cluster on its first line): anything else stops
the render with exit 2, so another cluster's rules are never left beside this one's.
Exit 0, or 2 with the field and the fix.

`gpuforge monitoring receiver [--port PORT]` serves the drain receiver (gpuforge.monitoring.receiver)
on 127.0.0.1 until stopped; exit 2 when the port cannot be opened.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from gpuforge.errors import InputError
from gpuforge.rendered_set import Recognise, write_set

if TYPE_CHECKING:
    from gpuforge.hardware import InstanceType
    from gpuforge.monitoring.config import MonitoringConfig
    from gpuforge.monitoring.sizing import Estimate
    from gpuforge.scheduler.render import SlurmCluster
    from gpuforge.stack_config import StackConfig

RULES_DIR = "rules"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitoring",
        help="render the Prometheus, Alertmanager and dcgm-exporter config of a stack",
        description="The metrics layer of a gpuforge cluster.",
    )
    commands = parser.add_subparsers(dest="monitoring_command", required=True, metavar="COMMAND")
    render = commands.add_parser(
        "render",
        help="write prometheus.yml, prometheus.flags, alertmanager.yml, rules/*.yml, dcgm-exporter-fields.csv, "
        "dashboards/*.json and sizing.json",
        description="Renders the files the stack's controller runs Prometheus and Alertmanager with, and the "
        "GPU nodes' dcgm-exporter field list, Grafana dashboards, and an estimate of the series and memory "
        "Prometheus needs (sizing.json, printed). Exit 0 when written; 2 for bad config or a folder that cannot be "
        "written or holds files gpuforge did not render for this cluster (nothing is written then).",
    )
    render.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    render.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    render.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="folder to write into: new, empty, or holding this cluster's earlier render (replaced)",
    )
    render.set_defaults(handler=_render)
    receiver = commands.add_parser(
        "receiver",
        help="serve the drain receiver for Alertmanager on 127.0.0.1 (the controller's service)",
        description='Drains, in Slurm, the node of every firing alert labelled drain="true" that Alertmanager '
        "posts (reason 'gpuforge: alert <name> ...'); never resumes a node, leaves a drained one as it is. "
        "Listens on 127.0.0.1 only, until stopped. Exit 2 when the port cannot be opened.",
    )
    receiver.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="PORT",
        help="port on 127.0.0.1 (default: alertmanager.yml's, 9098)",
    )
    receiver.set_defaults(handler=_receiver)


def check_stack(config: StackConfig) -> None:
    """Refuse (InputError, exit 2) a monitoring block the stack's cluster cannot honour, before any ARN exists.

    `render_set` runs these checks too; a stack whose files wait for a made workspace or topic
    (components.controller_monitoring) runs them at program time through this function.
    """
    _checked(config)


@dataclass(frozen=True)
class _Checked:
    """What every render of a stack starts from, once the block is known to fit the cluster."""

    config: StackConfig
    monitoring: MonitoringConfig
    cluster: SlurmCluster
    instance: InstanceType
    slurm_metrics: bool  # slurmctld serves its own metrics (prometheus.serves_slurm_metrics)
    sizing: Estimate


def _checked(config: StackConfig) -> _Checked:
    """The stack's config, cluster and sizing; InputError where the block cannot be honoured."""
    from gpuforge import hardware
    from gpuforge.components.slurm_controller import PROMETHEUS_DISK_GIB
    from gpuforge.monitoring.config import KEY, WorkspaceRef, stack_monitoring_config
    from gpuforge.monitoring.prometheus import SCRAPE_INTERVAL_S, serves_slurm_metrics
    from gpuforge.monitoring.sizing import estimate, max_retention_days, retention_problem
    from gpuforge.scheduler.render import render_files
    from gpuforge.scheduler.stack import stack_cluster

    monitoring = stack_monitoring_config(config)
    if not monitoring.enabled:
        raise InputError(
            f"{config.source}: {KEY}.enabled is false (the default without a Slurm scheduler), so stack "
            f"{config.stack} has no monitoring to render. Fix: set `{KEY}: {{enabled: true}}` on a stack with "
            "`gpuforge:scheduler: {type: slurm, ...}`."
        )
    cluster = stack_cluster(config)
    slurm_conf = next(text for name, text in render_files(cluster).items() if str(name) == "slurm.conf")
    instance = hardware.get(config.instance_type)
    slurm_metrics = serves_slurm_metrics(slurm_conf)
    sizing = estimate(
        instance,
        nodes=config.node_count,
        controller=str(config.scheduler.controller_instance_type),
        slurm_metrics=slurm_metrics,
        remote_write=isinstance(monitoring.remote_write, WorkspaceRef) or monitoring.remote_write == "amp",
    )
    problem = retention_problem(
        sizing.series,
        retention_days=monitoring.retention_days,
        scrape_interval_s=SCRAPE_INTERVAL_S,
        disk_gib=PROMETHEUS_DISK_GIB,
        where="the controller's root volume keeps for Prometheus (/var/lib/gpuforge/prometheus)",
    )
    if problem is not None:
        most = max_retention_days(
            sizing.series, scrape_interval_s=SCRAPE_INTERVAL_S, disk_gib=PROMETHEUS_DISK_GIB
        )
        fix = (
            f"set retentionDays to {most} or fewer, and for a longer history write to Amazon Managed Service "
            "for Prometheus (`remoteWrite: amp` or `{workspaceArn: ...}`), which keeps it off the controller "
            "(the controller's volume is not configurable yet)"
            if most
            else "not even one day fits: give the cluster fewer nodes (gpuforge:nodeCount); the controller's "
            "volume is not configurable yet (components/slurm_controller.py, ROOT_VOLUME_GIB)"
        )
        raise InputError(
            f"{config.source}: {KEY}.retentionDays = {monitoring.retention_days}: {problem}. Fix: {fix}."
        )
    return _Checked(config, monitoring, cluster, instance, slurm_metrics, sizing)


def render_set(
    config: StackConfig, *, workspace_arn: str | None = None, topic_arn: str | None = None
) -> tuple[str, dict[str, str]]:
    """(cluster name, relative path -> text) of the monitoring files of the stack `config` was read from.

    The stack program passes its own config (the engine's values), the CLI the stack file's.

    `workspace_arn` and `topic_arn` are the workspace and topic MonitoringResources made for
    `remoteWrite: amp` and `alerts.sns: create`: they exist only once `pulumi up` made them, so the
    controller's user data renders with them (components/slurm_controller.py), and the offline CLI,
    which has neither, refuses those two values (exit 2) rather than invent an ARN.
    """
    from gpuforge.monitoring.alertmanager import alertmanager_config
    from gpuforge.monitoring.config import KEY
    from gpuforge.monitoring.dashboards import dashboard_files
    from gpuforge.monitoring.fields import FIELDS_FILE, field_list_csv
    from gpuforge.monitoring.heartbeat import duration, timing
    from gpuforge.monitoring.prometheus import (
        DCGM_JOB,
        NODE_JOB,
        prometheus_config,
        prometheus_flags,
    )
    from gpuforge.monitoring.rules import (
        ALERTS_FILE,
        HEARTBEAT_FILE,
        USAGE_FILE,
        alert_rules,
        heartbeat_rules,
        recording_rules,
    )
    from gpuforge.monitoring.sizing import SIZING_FILE, sizing_json

    checked = _checked(config)
    config, monitoring, cluster, instance = (
        checked.config,
        checked.monitoring,
        checked.cluster,
        checked.instance,
    )
    slurm_metrics = checked.slurm_metrics
    if monitoring.remote_write == "amp" and workspace_arn is None:
        raise InputError(
            f"{config.source}: {KEY}.remoteWrite = 'amp': the workspace is made by `pulumi up`, and its ARN is "
            "known only then, so there is no remote-write URL to render offline. Fix: render with "
            "`remoteWrite: {workspaceArn: arn:aws:aps:...}` to check the file offline, or see the controller's "
            "/etc/gpuforge/monitoring after `pulumi up`."
        )
    if monitoring.alerts is not None and monitoring.alerts.sns == "create" and topic_arn is None:
        raise InputError(
            f"{config.source}: {KEY}.alerts.sns = 'create': the topic is made by `pulumi up`, and its ARN is "
            "known only then, so there is no topic to render offline. Fix: render with "
            "`alerts: {sns: arn:aws:sns:...}` to check the file offline, or see the controller's "
            "/etc/gpuforge/monitoring after `pulumi up`."
        )
    alerts = alert_rules(
        cluster=cluster.name, gpu_count=instance.gpu_count, dcgm_job=DCGM_JOB, node_job=NODE_JOB
    )
    beat = timing(monitoring.heartbeat.interval_seconds) if monitoring.heartbeat is not None else None
    files = {
        "prometheus.yml": prometheus_config(
            cluster=cluster.name,
            region=config.region,
            instance_type=config.instance_type,
            monitoring=monitoring,
            slurmctld_port=cluster.site.slurmctld_port if slurm_metrics else None,
            workspace_arn=workspace_arn,
            source=config.source,
        ),
        "prometheus.flags": prometheus_flags(
            cluster=cluster.name, resend_delay=duration(beat.resend_delay_ms) if beat else None
        ),
        "alertmanager.yml": alertmanager_config(
            cluster=cluster.name,
            region=config.region,
            monitoring=monitoring,
            source=config.source,
            topic_arn=topic_arn,
        ),
        f"{RULES_DIR}/{ALERTS_FILE}": alerts,
        f"{RULES_DIR}/{USAGE_FILE}": recording_rules(cluster=cluster.name),
        FIELDS_FILE: field_list_csv(instance, cluster=cluster.name),
        **dashboard_files(cluster=cluster.name, alert_rules_text=alerts),
        SIZING_FILE: sizing_json(checked.sizing, cluster=cluster.name),
    }
    if beat is not None:
        files[f"{RULES_DIR}/{HEARTBEAT_FILE}"] = heartbeat_rules(
            cluster=cluster.name, interval=duration(beat.rule_interval_ms)
        )
    return cluster.name, files


def _rendered_for(cluster: str) -> Recognise:
    """How `--out` recognises a file this command rendered for `cluster` (gpuforge.rendered_set): its
    first line names the file and the cluster, as a `#` comment or, in JSON, the `gpuforge` key."""
    from gpuforge.monitoring.dashboards import header_prefix

    def recognise(relative: PurePosixPath, first_line: str) -> bool:
        return first_line.startswith(
            f"# {relative.name} for cluster {cluster}, rendered by gpuforge"
        ) or first_line.startswith(header_prefix(relative.name, cluster))

    return recognise


def _render(args: argparse.Namespace) -> int:
    from gpuforge.stack_config import load_stack_config

    cluster, files = render_set(load_stack_config(args.stack_dir, args.stack))
    written, removed = write_set(args.out, files, cluster, _rendered_for(cluster))
    for target in written:
        print(f"wrote {target}")
    for stale in removed:
        print(f"removed {stale} (the previous render's; this render has none now)")
    from gpuforge.monitoring.sizing import SIZING_FILE, summary

    for line in summary(files[SIZING_FILE]):
        print(line)
    return 0


def _receiver(args: argparse.Namespace) -> int:
    from gpuforge.monitoring.receiver import PORT, serve

    port = PORT if args.port is None else args.port
    if not 0 < port < 65536:
        raise InputError(
            f"--port {port}: a TCP port is 1 to 65535. Fix: give the port alertmanager.yml posts to."
        )
    return serve(port)
