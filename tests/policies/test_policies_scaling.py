"""The stack policies read a launch template once, however many instances launch from it.

Every instance of a fixed-instances node group launches from one template with 32
interfaces (p5.48xlarge); reading those interfaces again for each instance made the
policy pack's time grow with nodes x interfaces (issue 20, item 10). The verdicts must
not change: the other policy tests check them on the same output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from policy_helpers import Images, mandatory, record_cluster, spec, verdicts

from gpuforge.policies import stack_graph
from gpuforge.policies.pack import POLICIES


def _reads_of_interfaces(monkeypatch: pytest.MonkeyPatch, images: Images, nodes: int) -> int:
    """How many times the stack policies read a list of interfaces, planning `nodes` instances."""
    calls = 0
    real: Callable[[object], list[object]] = stack_graph.items

    def counting(value: object) -> list[object]:
        nonlocal calls
        calls += 1
        return real(value)

    resources = record_cluster(spec(images, node_count=nodes, node_mode="instances"))
    with monkeypatch.context() as patch:
        patch.setattr(stack_graph, "items", counting)
        found = verdicts(resources, images)
    assert mandatory(found) == [], found
    return calls


def test_template_interfaces_are_read_once_per_template(
    monkeypatch: pytest.MonkeyPatch, images: Images
) -> None:
    few = _reads_of_interfaces(monkeypatch, images, 2)
    many = _reads_of_interfaces(monkeypatch, images, 12)
    assert few > 0, "the stack policies read the template's interfaces"
    assert many == few, f"{few} reads for 2 instances, {many} for 12: the template is read per instance"


def test_each_resource_is_deserialized_once_per_analysis(
    monkeypatch: pytest.MonkeyPatch, images: Images
) -> None:
    """pulumi_policy converts a resource's properties from protobuf again for every policy it runs;
    with 12 resource and 8 stack policies that was 20 conversions of each resource, and each new
    policy added one more. The runner converts each resource once per analysis (its registration's
    inputs, then the whole stack), whatever the number of policies."""
    resources = record_cluster(spec(images, node_count=4, node_mode="instances"))
    converted: list[object] = []
    real = json_format.MessageToDict

    def counting(message: Message, **options: Any) -> dict[str, Any]:
        converted.append(message)
        return real(message, **options)

    monkeypatch.setattr(json_format, "MessageToDict", counting)
    found = verdicts(resources, images)
    assert mandatory(found) == [], found
    # Once for the resource policies (Analyze, one call per registration), once for the stack
    # policies (AnalyzeStack, one call for all), no provider resources in this stack; and each
    # policy's config once when the pack is configured.
    expected = 2 * len(resources) + len(POLICIES)
    assert len(converted) == expected, f"{len(converted)} conversions for {len(resources)} resources"
