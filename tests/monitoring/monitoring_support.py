"""Helpers of the monitoring tests: stack folders, and the real Prometheus tools (tests/monitoring_tools.py,
the one helper every test folder uses for scripts/monitoring-root.sh's binaries)."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from monitoring_tools import tool
from stack_files import slurm_stack, write_stack

REPO = Path(__file__).resolve().parents[2]
SHIPPED_STACKS = REPO / "stacks" / "training"
StackMaker = Callable[..., Path]
__all__ = ["REPO", "SHIPPED_STACKS", "StackMaker", "alertmanager_command", "make_stack", "tool"]


@pytest.fixture
def make_stack(tmp_path: Path) -> StackMaker:
    """Writes Pulumi.yaml and Pulumi.<stack>.yaml into a fresh folder and returns the folder."""

    def make(stack: str = "test", **changes: Any) -> Path:
        return write_stack(tmp_path / "stack", stack, slurm_stack(**changes))

    return make


def alertmanager_command(
    config: Path,
    data: Path,
    port: int,
    scratch: Path,
    *,
    hosts: Path | None = None,
    ca_file: Path | None = None,
) -> list[str]:
    """The test root's Alertmanager on 127.0.0.1:`port`, in a private mount namespace (needs root).

    Debian's Alertmanager reads its default notification template from a fixed path,
    /usr/share/prometheus/alertmanager/default.tmpl (the package installs it there; the test root only
    unpacks it), so the namespace's /usr/share is an overlay that adds the test root's template. With
    `hosts`, the namespace's /etc/hosts is that file (a test's names for 127.0.0.1); with `ca_file`,
    Go's TLS trusts that CA (SSL_CERT_FILE, read by crypto/x509 on Linux). The host's own files are
    left as they are. `scratch` holds the overlay's folders.
    """
    alertmanager = tool("prometheus-alertmanager")
    templates = alertmanager.parents[2] / "usr" / "share" / "prometheus" / "alertmanager"
    upper, work = scratch / "upper", scratch / "work"
    shutil.copytree(templates, upper / "prometheus" / "alertmanager")
    work.mkdir(parents=True)
    overlay = f"lowerdir=/usr/share,upperdir={upper},workdir={work}"
    setup = f"mount -t overlay overlay -o {shlex.quote(overlay)} /usr/share"
    if hosts is not None:
        setup += f" && mount --bind {shlex.quote(str(hosts))} /etc/hosts"
    environment = ["env", f"SSL_CERT_FILE={ca_file}"] if ca_file is not None else []
    return [
        *environment,
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'{setup} && exec "$@"',
        "sh",
        str(alertmanager),
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
