"""`--report-asg`: a failing node marks itself Unhealthy so its Auto Scaling group replaces it.

The only part of the node agent that uses boto3, imported lazily so that the
checks run on a node without it. ShouldRespectGracePeriod=False matters: the
gate runs during boot, inside the group's health-check grace period, and with
the default the group would ignore the report until the period ends.
Source: Amazon EC2 Auto Scaling API, SetInstanceHealth,
https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_SetInstanceHealth.html
The node's role needs autoscaling:SetInstanceHealth.
"""

from __future__ import annotations

from gpuforge.aws_session import client as aws_client
from gpuforge.aws_session import open_session
from gpuforge.errors import GpuforgeError
from gpuforge.node.imds import Identity

UNHEALTHY = "Unhealthy"
COMMAND = "gpuforge node check --report-asg"
# Bounded: under --slurm the whole run must end before slurmd kills it at 60 s
# (gpuforge.node.slurm's budget): at most 2 attempts of 2 s connect + 4 s read.
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 4
MAX_ATTEMPTS = 2


class AsgReportError(GpuforgeError):
    """The Unhealthy report did not reach Auto Scaling; the node stays failed (exit 1)."""

    exit_code = 1


def report_unhealthy(identity: Identity) -> None:
    """Mark this instance Unhealthy in its Auto Scaling group, now, ignoring the grace period."""
    try:
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as error:
        raise AsgReportError(
            "--report-asg needs boto3, which is not installed on this node. "
            "Fix: install boto3 in the image (the image pipeline does), or drop --report-asg."
        ) from error
    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"total_max_attempts": MAX_ATTEMPTS, "mode": "standard"},
    )
    try:
        # The node's own AWS configuration (its role, or a profile someone set) read the one way; a mistake
        # there leaves the node failed and unreported, so it is this report's failure (exit 1), with the fix.
        session = open_session(identity.region, command=COMMAND)
        client = aws_client(session, "autoscaling", command=COMMAND, config=config)
    except GpuforgeError as error:
        raise AsgReportError(f"could not mark {identity.instance_id} Unhealthy: {error}") from None
    try:
        client.set_instance_health(
            InstanceId=identity.instance_id, HealthStatus=UNHEALTHY, ShouldRespectGracePeriod=False
        )
    except (BotoCoreError, ClientError) as error:
        raise AsgReportError(
            f"could not mark {identity.instance_id} Unhealthy in its Auto Scaling group ({identity.region}): "
            f"{error}. Fix: give the node's instance role autoscaling:SetInstanceHealth, and launch it from an "
            "Auto Scaling group."
        ) from error
