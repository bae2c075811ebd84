"""What the Slurm controller runs of the metrics layer: Prometheus, Alertmanager, the drain receiver.

`stack_monitoring` reads a stack's `gpuforge:monitoring` block and renders the controller's
files with `gpuforge monitoring render`'s own function (`gpuforge.monitoring.cli.render_set`),
so the controller's user data holds exactly what the CLI writes. The GPU nodes' dcgm-exporter
field list is the image's, and the dashboards and the sizing estimate are for people, so
only Prometheus's and Alertmanager's files go to the controller (`CONTROLLER_FILES`, rules/*).

gpuforge.monitoring imports gpuforge.components (the cluster tag), so it is imported here
inside the functions, never at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The files gpuforge-prometheus.service and gpuforge-alertmanager.service read (images/files/*.service).
CONTROLLER_FILES = ("prometheus.yml", "prometheus.flags", "alertmanager.yml")


@dataclass(frozen=True)
class ControllerMonitoring:
    """The controller's monitoring: its rendered files and the AWS access they need.

    `files` maps a path relative to /etc/gpuforge/monitoring to its text. `drain_on_alert`
    starts the drain receiver; `workspace_arn` (remote write) and `sns_topic_arn` (Alertmanager's
    SNS receiver) are the one workspace and the one topic the controller's role may write to.
    """

    files: Mapping[str, str] = field(default_factory=dict)
    drain_on_alert: bool = True
    workspace_arn: str | None = None
    sns_topic_arn: str | None = None


def controller_files(rendered: Mapping[str, str]) -> dict[str, str]:
    """The part of a `render_set` result the controller runs with: CONTROLLER_FILES and rules/*."""
    from gpuforge.monitoring.cli import RULES_DIR

    return {
        name: text
        for name, text in rendered.items()
        if name in CONTROLLER_FILES or name.startswith(f"{RULES_DIR}/")
    }


def stack_monitoring(stack_dir: Path, stack: str) -> ControllerMonitoring | None:
    """The controller's monitoring for stack `stack` of `stack_dir`; None where it is disabled.

    A block the cluster cannot honour (remoteWrite: amp, alerts.sns: create, both still unbuilt)
    is an InputError (exit 2) with the field and the fix, as `gpuforge monitoring render` says it.
    """
    from gpuforge.monitoring.cli import render_set
    from gpuforge.monitoring.config import WorkspaceRef, load_stack

    _, monitoring = load_stack(stack_dir, stack)
    if not monitoring.enabled:
        return None
    _, rendered = render_set(stack_dir, stack)
    workspace = monitoring.remote_write
    return ControllerMonitoring(
        files=controller_files(rendered),
        drain_on_alert=monitoring.drain_on_alert,
        workspace_arn=workspace.workspace_arn if isinstance(workspace, WorkspaceRef) else None,
        sns_topic_arn=monitoring.sns_topic_arn,
    )
