"""What the Slurm controller runs of the metrics layer: Prometheus, Alertmanager, the drain receiver.

`stack_monitoring` reads a stack's `gpuforge:monitoring` block and renders the controller's
files with `gpuforge monitoring render`'s own function (`gpuforge.monitoring.cli.render_set`),
so the controller's user data holds exactly what the CLI writes. A workspace (`remoteWrite: amp`)
or topic (`alerts.sns: create`) that MonitoringResources makes has an ARN only at `pulumi up`:
such a block is rendered then, inside the user data's `Output.all(...).apply(...)`, by `files_for`. The GPU nodes' dcgm-exporter
field list is the image's, and the dashboards and the sizing estimate are for people, so
only Prometheus's and Alertmanager's files go to the controller (`CONTROLLER_FILES`, rules/*).

gpuforge.monitoring imports gpuforge.components (the cluster tag), so it is imported here
inside the functions, never at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuforge.monitoring.config import MonitoringConfig
    from gpuforge.stack_config import StackConfig

# The files gpuforge-prometheus.service and gpuforge-alertmanager.service read (images/files/*.service).
CONTROLLER_FILES = ("prometheus.yml", "prometheus.flags", "alertmanager.yml")


@dataclass(frozen=True)
class ControllerMonitoring:
    """The controller's monitoring: its rendered files and the stack's validated block.

    `files` maps a path relative to /etc/gpuforge/monitoring to its text. `config` decides the
    drain receiver (`drain_on_alert`) and what `MonitoringResources` (components.monitoring_resources)
    grants the controller's role: the one workspace and the one topic, with the email subscriptions.
    """

    config: MonitoringConfig
    files: Mapping[str, str] = field(default_factory=dict)
    # (made workspace ARN, made topic ARN) -> files, for a block that needs them; None: `files` is all.
    render: Callable[[str | None, str | None], Mapping[str, str]] | None = None

    @property
    def needs_made_arns(self) -> bool:
        """Whether the files name a workspace or topic MonitoringResources makes (amp, create)."""
        alerts = self.config.alerts
        return self.config.remote_write == "amp" or (alerts is not None and alerts.sns == "create")

    def files_for(self, workspace_arn: str | None, topic_arn: str | None) -> Mapping[str, str]:
        """The files with the made workspace's and topic's ARNs (None where nothing was made)."""
        if self.render is None:
            return self.files
        return self.render(workspace_arn, topic_arn)


def controller_files(rendered: Mapping[str, str]) -> dict[str, str]:
    """The part of a `render_set` result the controller runs with: CONTROLLER_FILES and rules/*."""
    from gpuforge.monitoring.cli import RULES_DIR

    return {
        name: text
        for name, text in rendered.items()
        if name in CONTROLLER_FILES or name.startswith(f"{RULES_DIR}/")
    }


def stack_monitoring(config: StackConfig) -> ControllerMonitoring | None:
    """The controller's monitoring for the stack `config` was read from; None where it is disabled.

    A block the cluster cannot honour is an InputError (exit 2) with the field and the fix, as
    `gpuforge monitoring render` says it. Without a made workspace or topic the files are rendered
    now; with one, `files` is empty and `render` renders them once the ARNs are known.
    """
    from gpuforge.monitoring.cli import check_stack, render_set
    from gpuforge.monitoring.config import stack_monitoring_config

    monitoring = stack_monitoring_config(config)
    if not monitoring.enabled:
        return None

    def render(workspace_arn: str | None, topic_arn: str | None) -> dict[str, str]:
        _, rendered = render_set(config, workspace_arn=workspace_arn, topic_arn=topic_arn)
        return controller_files(rendered)

    pending = ControllerMonitoring(config=monitoring, render=render)
    if pending.needs_made_arns:
        check_stack(config)  # what does not wait for the ARNs is refused now, at plan time
        return pending
    return ControllerMonitoring(config=monitoring, files=render(None, None))
