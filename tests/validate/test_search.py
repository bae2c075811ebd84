"""find_slow_nodes against a simulated cluster: exact slow nodes within the documented round bound."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from gpuforge.validate import find_slow_nodes
from gpuforge.validate.search import Group, round_bound

FLOOR = 400.0
SIZES = [2, 3, 4, 5, 7, 8, 9, 16, 31, 64, 100, 127, 256, 257, 511, 512, 1000, 1023, 1024]


class Cluster:
    """Nodes of which some are slow: a group runs at its slowest member's pace."""

    def __init__(self, names: list[str], slow: set[str]) -> None:
        self.names, self.slow, self.rounds = names, slow, 0

    def measure(self, groups: Sequence[Group]) -> list[float]:
        self.rounds += 1
        members = [node for group in groups for node in group]
        assert len(members) == len(set(members)), "a node ran in two groups of one round"
        assert all(len(group) >= 2 for group in groups), "a network test needs two nodes"
        return [200.0 if set(group) & self.slow else 450.0 for group in groups]


def _names(count: int) -> list[str]:
    return [f"i-{index:05x}" for index in range(count)]


@pytest.mark.parametrize("count", SIZES)
def test_finds_exactly_the_slow_nodes_within_the_bound(count: int) -> None:
    rng = random.Random(count)
    names = _names(count)
    limit = count // 2 - 1  # k < n // 2: round 1 is sure to have a clean pair
    for slow_count in sorted({0, 1, 2, 3, max(0, limit // 4), max(0, limit // 2), max(0, limit)}):
        if slow_count > max(0, limit):
            continue
        slow = set(rng.sample(names, slow_count))
        cluster = Cluster(names, slow)
        result = find_slow_nodes(names, cluster.measure, FLOOR)
        assert set(result.slow) == slow and result.unresolved == ()
        assert result.rounds == cluster.rounds <= round_bound(count, slow_count)
        if 2 * (2 * slow_count + count % 2) <= count:
            assert result.rounds <= 2


def test_the_worst_placement_of_slow_nodes_stays_within_the_bound() -> None:
    names = _names(1024)
    slow = {names[index] for index in range(0, 2 * 511, 2)}  # one slow node in 511 of the 512 pairs
    cluster = Cluster(names, slow)
    result = find_slow_nodes(names, cluster.measure, FLOOR)
    assert set(result.slow) == slow
    assert result.rounds <= round_bound(1024, 511)


def test_when_every_pair_falls_short_nothing_is_named_slow() -> None:
    names = _names(6)
    cluster = Cluster(names, {names[0], names[2], names[4]})
    result = find_slow_nodes(names, cluster.measure, FLOOR)
    assert result.slow == () and set(result.unresolved) == set(names) and result.rounds == 1


def test_two_nodes_cannot_tell_which_one_is_slow() -> None:
    names = _names(2)
    result = find_slow_nodes(names, Cluster(names, {names[1]}).measure, FLOOR)
    assert result.slow == () and result.unresolved == tuple(names)


def test_a_healthy_even_cluster_takes_one_round_an_odd_one_two() -> None:
    names = _names(17)
    result = find_slow_nodes(names, Cluster(names, set()).measure, FLOOR)
    assert result.slow == () and result.unresolved == ()
    assert result.rounds == 2  # the odd node is checked against a good one
    even = _names(16)
    assert find_slow_nodes(even, Cluster(even, set()).measure, FLOOR).rounds == 1


def test_one_node_is_refused() -> None:
    with pytest.raises(ValueError, match="two nodes"):
        find_slow_nodes(["i-1"], lambda groups: [], FLOOR)
