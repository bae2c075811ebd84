"""The dead-man's switch: an always-firing alert that must keep reaching a receiver off the controller.

Prometheus and Alertmanager run on the Slurm controller, so a dead controller (or a stopped Prometheus
or Alertmanager) sends no alert at all. `gpuforge:monitoring.heartbeat` names a receiver outside it (an
HTTPS URL or an SNS topic), and the rendered files send it the alert `GpuforgeHeartbeat` (expr
`vector(1)`, gpuforge/data/monitoring_alerts.yaml) every `intervalSeconds`; the receiver's job is to
raise the alarm when it stops coming (README, 'Monitoring').

Every interval of the chain is derived here from the one setting, so the bound in which a receiver
can call the heartbeat missing is a number gpuforge states, not a guess:

- Alertmanager repeats a notification of an unchanged group only at a flush of the group (every
  `group_interval`) that comes more than `repeat_interval` after the last one was logged
  (notify/dedup_stage.go, needsUpdate; dispatch/dispatch.go, aggrGroup.run; prometheus/alertmanager
  v0.33.0). With group_interval a quarter of the interval and repeat_interval the other three
  quarters, the fourth flush after a delivery sends the next: one every interval, and one flush
  later (interval + group_interval) when a delivery took longer than a flush.
- Prometheus sends a firing alert to Alertmanager again at the first rule evaluation more than
  `--rules.alert.resend-delay` after the last send, and marks it valid for 4 x max(resend delay,
  the group's evaluation interval) (rules/alerting.go, needsSending and sendAlerts; prometheus/prometheus
  Go module v0.313.4, the pinned 3.13.4). Alertmanager keeps a dead Prometheus's heartbeat firing,
  and so delivering, until then. The resend delay and the heartbeat group's evaluation interval
  are the quarter too, at most Prometheus's defaults (1m, cmd/prometheus/main.go of the same
  module; 15s, gpuforge's scrape and evaluation interval).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 60
MIN_INTERVAL_S = 4  # a quarter of it is a whole second or more
MAX_INTERVAL_S = 3600  # a heartbeat an hour apart would let a dead controller go unnoticed for hours
PROMETHEUS_RESEND_DELAY_MS = 60_000  # Prometheus's default --rules.alert.resend-delay (1m)
# AWS/SNS metrics reach CloudWatch every five minutes ("automatically collected and pushed to
# CloudWatch every five minutes", https://docs.aws.amazon.com/sns/latest/dg/MonitorSNSwithCloudWatch.html),
# so the alarm reads NumberOfMessagesPublished in five-minute periods.
SNS_METRIC_PERIOD_S = 300
MAX_URL_CHARS = 2000


def duration(milliseconds: int) -> str:
    """A Prometheus/Alertmanager duration (model.ParseDuration): whole seconds as `Ns`, else `Nms`."""
    return f"{milliseconds // 1000}s" if milliseconds % 1000 == 0 else f"{milliseconds}ms"


@dataclass(frozen=True)
class HeartbeatTiming:
    """The intervals rendered for one `intervalSeconds`, in milliseconds, and the bounds they give."""

    interval_ms: int
    group_interval_ms: int  # the heartbeat route's group_interval
    repeat_interval_ms: int  # the heartbeat route's repeat_interval
    resend_delay_ms: int  # prometheus.flags' --rules.alert.resend-delay
    rule_interval_ms: int  # the heartbeat rule group's evaluation interval

    @property
    def longest_gap_ms(self) -> int:
        """The longest wait between two deliveries while everything runs: a late flush adds one group_interval."""
        return self.interval_ms + self.group_interval_ms

    @property
    def missing_after_ms(self) -> int:
        """How long a receiver waits before calling the heartbeat missing: the longest gap and one more flush."""
        return self.longest_gap_ms + self.group_interval_ms

    @property
    def kept_after_stop_ms(self) -> int:
        """How long after Prometheus's last send Alertmanager keeps its heartbeat firing (and delivering)."""
        return 4 * max(self.resend_delay_ms, self.rule_interval_ms)

    @property
    def noticed_within_ms(self) -> int:
        """The bound from Prometheus stopping to a receiver calling the heartbeat missing."""
        return self.kept_after_stop_ms + self.missing_after_ms

    @property
    def alarm_periods(self) -> int:
        """Five-minute CloudWatch periods without a publish that mean 'missing': their span exceeds missing_after."""
        return self.missing_after_ms // (SNS_METRIC_PERIOD_S * 1000) + 1


def timing(interval_s: int) -> HeartbeatTiming:
    """The rendered intervals for a heartbeat every `interval_s` seconds (MIN_INTERVAL_S..MAX_INTERVAL_S)."""
    # prometheus.yml's evaluation_interval; imported here, as gpuforge.monitoring.config imports this module
    from gpuforge.monitoring.prometheus import SCRAPE_INTERVAL_S

    interval_ms = interval_s * 1000
    quarter = interval_ms // 4
    return HeartbeatTiming(
        interval_ms=interval_ms,
        group_interval_ms=quarter,
        repeat_interval_ms=interval_ms - quarter,
        resend_delay_ms=min(quarter, PROMETHEUS_RESEND_DELAY_MS),
        rule_interval_ms=min(quarter, SCRAPE_INTERVAL_S * 1000),
    )


# RFC 3986 (https://www.rfc-editor.org/rfc/rfc3986#section-3): an `https` URL with a host (RFC 1035
# letter-digit-hyphen labels, an IPv4 address or a bracketed IPv6 address), an optional port, and a
# path and query of unreserved characters, sub-delims, ':', '@', '/' (and '?' in the query) or
# %-escapes. No user information and no fragment (see url_problem).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
_URL = re.compile(
    rf"https://(?P<host>{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{{1,5}}))?"
    rf"(?P<path>/(?:{_PCHAR}|/)*)?(?:\?(?:{_PCHAR}|[/?])*)?",
    re.ASCII,
)
URL_RULE = (
    "https://host[:port][/path][?query] (RFC 3986): a host name, IPv4 or [IPv6] address, and a path and "
    "query of letters, digits, -._~!$&'()*+,;=:@/ and %XX escapes"
)


def url_problem(url: str) -> tuple[str, str] | None:
    """(problem, fix) when `url` cannot be the heartbeat's receiver; None when it can.

    Refused, each for its own reason: anything but ASCII printable characters (a control character
    or line break changes what Alertmanager's YAML or a log line says); any scheme but https (the
    heartbeat would cross the network in clear text, and a forged one hides a dead controller);
    user:password@ (Alertmanager would send the password with every heartbeat, and it would sit in
    alertmanager.yml and the stack file; a receiver's token belongs in the path, where the README
    says how to keep it); a fragment (never sent); and the controller itself or the instance
    metadata service (localhost, loopback, link-local and unspecified addresses), which die with it.
    """
    if any(not 0x21 <= ord(char) <= 0x7E for char in url):
        return (
            "spaces, control characters, line breaks and non-ASCII characters are not part of a URL",
            "give the URL in ASCII: a non-ASCII host name in its xn-- form, any other character %-escaped",
        )
    if len(url) > MAX_URL_CHARS:
        return (f"longer than {MAX_URL_CHARS} characters", "give the receiver's URL itself")
    scheme, separator, rest = url.partition("://")
    if not separator or scheme != "https":
        return (
            "not an https URL: the heartbeat must reach the receiver encrypted and from a server it can "
            "authenticate, or anyone on the path could forge it and hide a dead controller",
            "give the receiver's https:// URL (lower-case scheme)",
        )
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        return (
            "the URL carries user information (user:password@): Alertmanager would send it with every "
            "heartbeat and it would be stored in alertmanager.yml and the stack file",
            "use the receiver's URL with its token in the path, as such services give it, and no user:password@",
        )
    if "#" in url:
        return (
            "a fragment (#...) is never sent to the receiver",
            "remove it, or write a '#' that belongs to the token as %23",
        )
    match = _URL.fullmatch(url)
    if match is None:
        return (f"not a URL of the form {URL_RULE}", "give the URL as the receiver's service shows it")
    port = match["port"]
    if port is not None and not 0 < int(port) < 65536:
        return (f"port {port} is not 1 to 65535", "give the receiver's port")
    return _host_problem(match["host"])


def _host_problem(host: str) -> tuple[str, str] | None:
    """The controller itself, by name or address, cannot be a receiver outside it."""
    name = host.rstrip(".").lower()
    fix = "give a receiver that runs off the controller (another host, or a service on the internet)"
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761, section 6.3: always loopback
        return ("localhost is the controller itself, which the heartbeat is there to watch", fix)
    literal = name[1:-1] if name.startswith("[") else name
    labels = literal.split(".")
    if not name.startswith("[") and not labels[-1].isdigit():
        return None  # a host name: a top-level label is never all digits (RFC 3696, section 2)
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return (
            f"{host} is neither a host name nor an IP address",
            "give the receiver's host name or address",
        )
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if address.is_loopback or address.is_unspecified or address.is_link_local or address.is_multicast:
        return (
            f"{address} is the controller itself, the instance metadata service or no single host; none "
            "outlives the controller",
            fix,
        )
    return None
