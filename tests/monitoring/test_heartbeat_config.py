"""`gpuforge:monitoring.heartbeat`: the dead-man's switch's receiver, read or refused at plan time (exit 2).

The URL is checked by gpuforge.monitoring.heartbeat.url_problem: https only, no user:password@, no
fragment, nothing but ASCII printable characters, never the controller itself; the SNS topic must be
an ARN in the stack's region, with `alerts` for its alarm to notify, and not the alerts topic.
"""

from __future__ import annotations

from typing import Any

import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st
from monitoring_support import StackMaker

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.monitoring.config import load_stack
from gpuforge.monitoring.heartbeat import url_problem

TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-heartbeat"
ALERTS = {"sns": "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"}


def _refused(make_stack: StackMaker, block: dict[str, Any]) -> str:
    folder = make_stack(**{"gpuforge:monitoring": block})
    with pytest.raises(InputError) as caught:
        load_stack(folder, "test")
    message = caught.value.message
    assert str(folder / "Pulumi.test.yaml") in message and "Fix:" in message
    return message


@pytest.mark.parametrize(
    "url",
    [
        "https://hc.example.com/ping/0f3c9a52-7d0e-4b8e-9a0e-3c1b2f4d5e6f",
        "https://deadman.example.org:8443/p/token_ABC-123?source=gpuforge&x=%2F",
        "https://203.0.113.7/heartbeat",
        "https://[2001:db8::7]:9443/beat",
        "https://heartbeat.gpuforge.test",
    ],
)
def test_an_https_url_off_the_controller_is_read(make_stack: StackMaker, url: str) -> None:
    _, monitoring = load_stack(make_stack(**{"gpuforge:monitoring": {"heartbeat": {"url": url}}}), "test")
    assert monitoring.heartbeat is not None
    assert monitoring.heartbeat.url == url and monitoring.heartbeat.sns is None
    assert monitoring.heartbeat.interval_seconds == 60


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://hc.example.com/ping/abc", "not an https URL"),
        ("HTTPS://hc.example.com/ping/abc", "not an https URL"),
        ("hc.example.com/ping/abc", "not an https URL"),
        ("ftp://hc.example.com/abc", "not an https URL"),
        ("https://user:secret@hc.example.com/ping", "user information"),
        ("https://token@hc.example.com/ping", "user information"),
        ("https://hc.example.com/ping#abc", "a fragment"),
        ("https://hc.example.com/ping\n/abc", "control characters"),
        ("https://hc.example.com/ping\x1b[2J", "control characters"),
        ("https://hc.example.com/pi ng", "spaces"),
        ("https://hc.example.com/ping\u2028", "non-ASCII"),
        ("https://hc.exämple.com/ping", "non-ASCII"),
        ("https://hc.example.com/p<i>ng", "not a URL of the form"),
        ("https://hc.example.com/p%zzing", "not a URL of the form"),
        ("https://hc_example.com/ping", "not a URL of the form"),
        ("https:///ping", "not a URL of the form"),
        ("https://hc.example.com:0/ping", "port 0"),
        ("https://hc.example.com:70000/ping", "port 70000"),
        ("https://localhost:9000/beat", "the controller itself"),
        ("https://metrics.localhost/beat", "the controller itself"),
        ("https://127.0.0.1:9000/beat", "the controller itself"),
        ("https://[::1]/beat", "the controller itself"),
        ("https://[::ffff:127.0.0.1]/beat", "the controller itself"),
        ("https://169.254.169.254/latest", "the instance metadata service"),
        ("https://0.0.0.0/beat", "the controller itself"),
        ("https://999.1.1.1/beat", "neither a host name nor an IP address"),
        ("https://hc.example.com/" + "a" * 2000, "longer than 2000"),
    ],
)
def test_a_url_that_cannot_be_the_receiver_is_refused(make_stack: StackMaker, url: str, rule: str) -> None:
    message = _refused(make_stack, {"heartbeat": {"url": url}})
    assert f"gpuforge:monitoring.heartbeat.url = {cut(url)}: " in message
    assert rule in message
    assert message.isascii() and "\n" not in message and "\r" not in message


@given(url=st.text(min_size=1, max_size=60))
@FUZZ
def test_whatever_url_is_accepted_is_plain_https_with_no_user_information(url: str) -> None:
    """Any text: accepted only as ASCII printable https://host... without '@' in the authority or a '#'."""
    if url_problem(url) is None:
        assert url.startswith("https://") and url.isascii() and url.isprintable() and " " not in url
        authority = url[len("https://") :].split("/", 1)[0].split("?", 1)[0]
        assert "@" not in authority and "#" not in url and authority


@given(
    position=st.integers(min_value=0, max_value=40),
    char=st.characters(blacklist_categories=("L", "N", "P", "S")),
)
@FUZZ
def test_a_control_or_space_character_anywhere_is_refused(position: int, char: str) -> None:
    url = "https://hc.example.com/ping/0f3c9a52-7d0e"
    assert url_problem(url) is None
    problem = url_problem(url[:position] + char + url[position:])
    assert problem is not None


def test_the_interval_is_read_and_bounded(make_stack: StackMaker) -> None:
    block = {"heartbeat": {"url": "https://hc.example.com/p", "intervalSeconds": 8}}
    _, monitoring = load_stack(make_stack(**{"gpuforge:monitoring": block}), "test")
    assert monitoring.heartbeat is not None and monitoring.heartbeat.interval_seconds == 8
    for bad in (3, 3601, "60", 60.5, True):
        message = _refused(
            make_stack, {"heartbeat": {"url": "https://hc.example.com/p", "intervalSeconds": bad}}
        )
        assert f"gpuforge:monitoring.heartbeat.intervalSeconds = {cut(bad)}" in message


def test_an_sns_topic_in_the_stack_s_region_with_alerts_is_read(make_stack: StackMaker) -> None:
    block = {"alerts": ALERTS, "heartbeat": {"sns": TOPIC}}
    _, monitoring = load_stack(make_stack(**{"gpuforge:monitoring": block}), "test")
    assert monitoring.heartbeat is not None and monitoring.heartbeat.sns == TOPIC


@pytest.mark.parametrize(
    ("block", "rule"),
    [
        ({"heartbeat": {}}, "give exactly one receiver"),
        ({"alerts": ALERTS, "heartbeat": {"url": "https://hc.example.com/p", "sns": TOPIC}}, "exactly one"),
        ({"alerts": ALERTS, "heartbeat": {"sns": "gpuforge-heartbeat"}}, "not an SNS topic ARN"),
        ({"alerts": ALERTS, "heartbeat": {"sns": TOPIC + "\nx"}}, "not an SNS topic ARN"),
        (
            {"alerts": ALERTS, "heartbeat": {"sns": "arn:aws:sns:eu-west-1:123456789012:beat"}},
            "the topic is in eu-west-1",
        ),
        ({"heartbeat": {"sns": TOPIC}}, "the stack has no `alerts`"),
        ({"alerts": {"sns": TOPIC}, "heartbeat": {"sns": TOPIC}}, "the same topic as alerts.sns"),
        ({"heartbeat": {"url": "https://hc.example.com/p", "every": 5}}, "heartbeat.every: unknown key"),
    ],
)
def test_a_heartbeat_block_that_cannot_work_is_refused(
    make_stack: StackMaker, block: dict[str, Any], rule: str
) -> None:
    message = _refused(make_stack, block)
    assert "gpuforge:monitoring.heartbeat" in message and rule in message
