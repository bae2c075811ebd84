"""`gpuforge:monitoring`: the stack-config block of the metrics layer.

```yaml
  gpuforge:monitoring:          # optional: every key has a default
    enabled: true               # default: true where gpuforge:scheduler.type is slurm, else false
    retentionDays: 15           # Prometheus's local retention (storage.tsdb.retention.time)
    remoteWrite: none           # none | amp (a workspace MonitoringResources makes) | {workspaceArn: arn:...}
    alerts:                     # optional: no key, no SNS receiver
      sns: create               # create (a topic MonitoringResources makes) | an SNS topic ARN
      email: [oncall@example.com]
    drainOnAlert: true          # alerts that say "this node is bad" drain it in Slurm
    heartbeat:                  # optional: an always-firing alert to a receiver off the controller
      url: https://...          # an HTTPS URL (a dead-man's-switch service) | sns: <SNS topic ARN>
      intervalSeconds: 60       # how often it arrives (4 to 3600)
```

`heartbeat` is gpuforge.monitoring.heartbeat's dead-man's switch: with `sns`, MonitoringResources
grants the controller publish on the topic and makes the CloudWatch alarm that tells the alerts
topic when the heartbeat stops, so it needs `alerts` and a topic in the stack's region.

`amp` and `create` are made by components/monitoring_resources.py at `pulumi up`, which also
subscribes each email address and grants the controller's role write and publish on exactly
those ARNs. The names are contracts (issue 21). The block is validated like every other block: a key
that is unknown, of the wrong type, or one the cluster cannot honour (monitoring without the
Slurm controller Prometheus runs on; a workspace or topic ARN of another partition than the
stack's region) is an InputError (exit 2) naming the file, the key, the value and the fix.

gpuforge/stack_config.py does not know the key yet (it refuses unknown `gpuforge:` keys),
so `load_stack` takes the block out of the stack file's engine values before the stack
config reads the rest. `parse_monitoring` reads the block in the engine's form (JSON text),
so the same function serves a running Pulumi program once stack_config reads the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.monitoring.heartbeat import DEFAULT_INTERVAL_S, MAX_INTERVAL_S, MIN_INTERVAL_S, url_problem
from gpuforge.stack_config import (
    NAMESPACE,
    StackConfig,
    load_stack_config,
)

KEY = f"{NAMESPACE}:monitoring"
DOC = "the keys are listed in gpuforge/monitoring/config.py and the README ('Monitoring')"
DEFAULT_RETENTION_DAYS = 15
# Prometheus's retention is a duration; ten years is far past any controller volume and keeps
# a typo (15000) from being read as an intent.
MAX_RETENTION_DAYS = 3650

# ARNs: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html (arn:partition:service:
# region:account-id:resource). AMP workspace: arn:aws:aps:<region>:<account>:workspace/ws-<id>
# (https://docs.aws.amazon.com/prometheus/latest/userguide/security-iam.html, resource types);
# SNS topic: up to 256 letters, digits, - and _, `.fifo` for a FIFO topic
# (https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html, Name).
_ARN = r"arn:(?P<partition>aws|aws-cn|aws-us-gov):{service}:(?P<region>[a-z]{{2}}(?:-[a-z]+)+-[0-9]):[0-9]{{12}}:"
_WORKSPACE_ARN = re.compile(_ARN.format(service="aps") + r"workspace/ws-[A-Za-z0-9-]{1,64}", re.ASCII)
_TOPIC_ARN = re.compile(_ARN.format(service="sns") + r"[A-Za-z0-9_-]{1,256}(?:\.fifo)?", re.ASCII)
# An address SNS can mail: RFC 5322's addr-spec (https://www.rfc-editor.org/rfc/rfc5322#section-3.4.1)
# in its plain form, a dot-atom local part (section 3.2.3's atext: letters, digits and
# !#$%&'*+-/=?^_`{|}~, in dot-separated words) of at most 64 octets (RFC 5321, section 4.5.3.1.1),
# then a host name of dot-separated letter-digit-hyphen labels of at most 63 (RFC 1035, section
# 2.3.4). Quoted local parts, comments, address literals, spaces, control characters and non-ASCII
# letters are refused: each is a place where a value changes meaning in another program, and none
# is needed to name a mailbox (a non-ASCII domain has its xn-- form). SNS confirms the rest by mail.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"(?=[^@]{{1,64}}@){_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+", re.ASCII)
_EMAIL_RULE = (
    "an address is local-part@domain: the local part at most 64 letters, digits and "
    "!#$%&'*+-/=?^_`{|}~ in dot-separated words, the domain dot-separated labels of letters, digits and "
    "hyphens (RFC 5322 addr-spec without quotes or comments); spaces, quotes, control characters and "
    "non-ASCII letters are not part of it"
)
MAX_DOMAIN_CHARS = 253  # a host name's text form (RFC 1035, section 2.3.4: 255 octets on the wire)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class WorkspaceRef(_Strict):
    """`remoteWrite: {workspaceArn: ...}`: an existing Amazon Managed Service for Prometheus workspace."""

    workspace_arn: StrictStr = Field(alias="workspaceArn")


class AlertsConfig(_Strict):
    """`alerts`: where a person hears of an alert (Alertmanager's SNS receiver)."""

    sns: StrictStr = "create"  # "create" or a topic ARN
    email: list[StrictStr] = Field(default_factory=list)


class HeartbeatConfig(_Strict):
    """`heartbeat`: the receiver outside the controller that must keep hearing GpuforgeHeartbeat."""

    url: StrictStr | None = None  # an https URL (gpuforge.monitoring.heartbeat.url_problem)
    sns: StrictStr | None = None  # an existing SNS topic ARN, in the stack's region
    interval_seconds: StrictInt = Field(
        default=DEFAULT_INTERVAL_S, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, alias="intervalSeconds"
    )


class _MonitoringKeys(_Strict):
    enabled: StrictBool | None = None
    retention_days: StrictInt = Field(
        default=DEFAULT_RETENTION_DAYS, ge=1, le=MAX_RETENTION_DAYS, alias="retentionDays"
    )
    remote_write: Literal["none", "amp"] | WorkspaceRef = Field(default="none", alias="remoteWrite")
    alerts: AlertsConfig | None = None
    drain_on_alert: StrictBool = Field(default=True, alias="drainOnAlert")
    heartbeat: HeartbeatConfig | None = None


class MonitoringConfig(BaseModel):
    """One stack's validated monitoring settings, defaults applied."""

    model_config = ConfigDict(frozen=True)

    enabled: bool
    retention_days: int
    remote_write: str | WorkspaceRef  # "none", "amp" or an existing workspace
    alerts: AlertsConfig | None  # None: no SNS receiver
    drain_on_alert: bool
    heartbeat: HeartbeatConfig | None = None  # None: no dead-man's switch

    @property
    def sns_topic_arn(self) -> str | None:
        """The topic ARN the config names; None for `create` (the component's topic) or no alerts."""
        if self.alerts is None or self.alerts.sns == "create":
            return None
        return self.alerts.sns


def _error(source: str, field: str, value: object, problem: str, fix: str) -> InputError:
    return InputError(f"{source}: {KEY}.{field} = {cut(value)}: {problem}. Fix: {fix} ({DOC}).")


def _partition(region: str) -> str:
    """The AWS partition of a region name (https://docs.aws.amazon.com/whitepapers/latest/aws-fault-isolation-boundaries/partitions.html)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _check_arn(source: str, field: str, value: str, pattern: re.Pattern[str], what: str, region: str) -> None:
    match = pattern.fullmatch(value)
    if match is None:
        raise _error(
            source,
            field,
            value,
            f"not {what}",
            f"give the ARN as AWS prints it, e.g. {_example(pattern, region)}",
        )
    partition = _partition(region)
    if match["partition"] != partition:
        raise _error(
            source,
            field,
            value,
            f"the ARN is in partition {match['partition']}, and the stack's region {region} is in {partition}, "
            "where nothing can reach it",
            f"use one in partition {partition}",
        )


def _example(pattern: re.Pattern[str], region: str) -> str:
    partition = _partition(region)
    if pattern is _WORKSPACE_ARN:
        return f"arn:{partition}:aps:{region}:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
    return f"arn:{partition}:sns:{region}:123456789012:gpuforge-alerts"


def _check_emails(source: str, addresses: list[str]) -> None:
    """Each address an addr-spec SNS can mail, and each once: two subscriptions of one address are one
    subscription in SNS, so removing either from the list would unsubscribe the other too."""
    seen: dict[str, int] = {}
    for index, address in enumerate(addresses):
        field = f"alerts.email[{index}]"
        if _EMAIL.fullmatch(address) is None or len(address.rsplit("@", 1)[1]) > MAX_DOMAIN_CHARS:
            raise _error(
                source,
                field,
                address,
                f"not an email address SNS can subscribe ({_EMAIL_RULE})",
                "give the address as name@example.com, with a non-ASCII domain in its xn-- form",
            )
        local, domain = address.rsplit("@", 1)
        key = f"{local}@{domain.lower()}"  # host names are case-insensitive, local parts may not be
        if key in seen:
            raise _error(
                source,
                field,
                address,
                f"the same address as alerts.email[{seen[key]}]; SNS keeps one subscription for both, so "
                "removing either later would unsubscribe the address",
                "list each address once",
            )
        seen[key] = index


def _check_heartbeat(
    source: str, heartbeat: HeartbeatConfig, alerts: AlertsConfig | None, region: str
) -> None:
    """One receiver, outside the controller; an SNS one where gpuforge's CloudWatch alarm can watch it."""
    if (heartbeat.url is None) == (heartbeat.sns is None):
        raise _error(
            source,
            "heartbeat",
            heartbeat.model_dump(by_alias=True, exclude_none=True),
            "give exactly one receiver, `url` or `sns`",
            "`heartbeat: {url: https://...}` for a dead-man's-switch service, or `heartbeat: {sns: <topic ARN>}`",
        )
    if heartbeat.url is not None:
        problem = url_problem(heartbeat.url)
        if problem is not None:
            raise _error(source, "heartbeat.url", heartbeat.url, problem[0], problem[1])
        return
    topic = heartbeat.sns
    assert topic is not None
    _check_arn(source, "heartbeat.sns", topic, _TOPIC_ARN, "an SNS topic ARN", region)
    topic_region = topic.split(":")[3]
    if topic_region != region:
        raise _error(
            source,
            "heartbeat.sns",
            topic,
            f"the topic is in {topic_region}; the CloudWatch alarm that notices a missing heartbeat reads the "
            f"topic's metrics in the stack's region, {region}",
            f"give a topic in {region}, or use `heartbeat.url`",
        )
    if alerts is None:
        raise _error(
            source,
            "heartbeat.sns",
            topic,
            "the CloudWatch alarm that notices a missing heartbeat notifies the alerts topic, and the stack has "
            "no `alerts`, so nobody would hear it",
            "add `alerts: {sns: ..., email: [...]}`, or use `heartbeat.url`",
        )
    if alerts.sns == topic:
        raise _error(
            source,
            "heartbeat.sns",
            topic,
            "the same topic as alerts.sns: every heartbeat would reach the people subscribed to alerts, and the "
            "alarm would count alerts as heartbeats",
            "give a topic of its own (no subscriptions needed)",
        )


def _pydantic_error(source: str, error: ValidationError) -> InputError:
    lines = []
    for detail in error.errors():
        # Union members add their type to the path (remoteWrite.literal[...], remoteWrite.WorkspaceRef): drop them.
        loc = [str(part) for part in detail["loc"] if not str(part).startswith(("literal[", "WorkspaceRef"))]
        field = ".".join([KEY, *loc]) if loc else KEY
        if detail["type"] == "missing":
            lines.append(f"  {field}: required key is missing")
        elif detail["type"] == "extra_forbidden":
            lines.append(f"  {field}: unknown key (value {cut(detail.get('input'))})")
        else:
            lines.append(f"  {field} = {cut(detail.get('input'))}: {detail['msg']}")
    unique = list(dict.fromkeys(lines))
    return InputError(
        f"{source}: invalid {KEY}:\n" + "\n".join(unique) + f"\nFix: correct the keys above; {DOC}."
    )


def parse_monitoring(raw: str | None, config: StackConfig) -> MonitoringConfig:
    """The monitoring block of `config`'s stack from its engine form (JSON text; None: no block)."""
    source = config.source
    decoded: Any = {}
    if raw is not None:
        try:
            decoded = json.loads(raw)
        except json.JSONDecodeError:
            decoded = raw
        if not isinstance(decoded, dict):
            raise InputError(
                f"{source}: {KEY} = {cut(decoded)}: expected a mapping of keys to values. "
                f"Fix: write the block as a mapping, e.g. `{KEY}: {{retentionDays: 15}}` ({DOC})."
            )
    try:
        keys = _MonitoringKeys.model_validate(decoded)
    except ValidationError as error:
        raise _pydantic_error(source, error) from None
    has_slurm = config.scheduler.type == "slurm"
    enabled = has_slurm if keys.enabled is None else keys.enabled
    if enabled and not has_slurm:
        raise _error(
            source,
            "enabled",
            True,
            f"Prometheus and Alertmanager run on the Slurm controller, and stack {config.stack} has none "
            f"({NAMESPACE}:scheduler.type is {config.scheduler.type!r})",
            f"set `{NAMESPACE}:scheduler: {{type: slurm, ...}}`, or `enabled: false`",
        )
    if isinstance(keys.remote_write, WorkspaceRef):
        _check_arn(
            source,
            "remoteWrite.workspaceArn",
            keys.remote_write.workspace_arn,
            _WORKSPACE_ARN,
            "an Amazon Managed Service for Prometheus workspace ARN",
            config.region,
        )
    if keys.alerts is not None:
        if keys.alerts.sns != "create":
            _check_arn(
                source,
                "alerts.sns",
                keys.alerts.sns,
                _TOPIC_ARN,
                "`create` or an SNS topic ARN",
                config.region,
            )
        _check_emails(source, keys.alerts.email)
    if keys.heartbeat is not None:
        _check_heartbeat(source, keys.heartbeat, keys.alerts, config.region)
    return MonitoringConfig(
        enabled=enabled,
        retention_days=keys.retention_days,
        remote_write=keys.remote_write,
        alerts=keys.alerts,
        drain_on_alert=keys.drain_on_alert,
        heartbeat=keys.heartbeat,
    )


def stack_monitoring_config(config: StackConfig) -> MonitoringConfig:
    """The monitoring block of a stack whose config is read already (the program's own, or a file's)."""
    return parse_monitoring(config.engine_values.get(KEY), config)


def load_stack(stack_dir: Path, stack: str) -> tuple[StackConfig, MonitoringConfig]:
    """The stack's config and its monitoring block; InputError (exit 2) names the file and key."""
    config = load_stack_config(stack_dir, stack)
    return config, stack_monitoring_config(config)
