"""Find the nodes that hold a cluster's all-reduce below its floor, in few parallel rounds.

A network test needs two nodes, so every group here has two: a group below the floor
holds a slow node (the slowest link sets the pace of a ring). The search:

1. **Round 1** pairs the nodes (the last one waits when the count is odd) and runs every
   pair at once. Both nodes of a pair at or above the floor are good.
2. **Later rounds** pair each undecided node (a member of a slow pair, or the odd one)
   with a distinct known-good node, as many at once as there are good nodes. The partner
   is known good, so a slow pair means the undecided node is slow, and a good one clears
   it and adds it to the good pool. No node is ever named slow without such a pair.

Round bound (`round_bound`): with `k` slow nodes of `n`, at most `u = 2k + (n mod 2)` nodes
are undecided after round 1 and at least `n - u` are good, so the search takes at most
`1 + ceil(u / (n - u))` rounds: 1 round for a healthy cluster of even size, 2 whenever
`u <= n / 2` (k up to about a quarter of the cluster), and `1 + ceil(u / (n - u))` in general. The result is exact
whenever round 1 has a pair with no slow node, which is certain when `k < n // 2`
(k slow nodes spoil at most k of the n // 2 pairs). When every pair of round 1 falls short
there is no good reference: the search stops and returns every node as unresolved, since
the cause is then the fabric or most of the cluster, not a few nodes to drain. A 2-node
cluster whose pair falls short is such a case: two nodes cannot tell which one is slow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

Group = tuple[str, ...]
# One round: a test per group, all groups at once; each group's busbw in GB/s, in order.
Measure = Callable[[Sequence[Group]], Sequence[float]]


class SearchResult(NamedTuple):
    """The slow nodes, the rounds used, and the nodes the search could not decide."""

    slow: tuple[str, ...]
    rounds: int
    unresolved: tuple[str, ...] = ()


def round_bound(nodes: int, slow: int) -> int:
    """The most rounds `find_slow_nodes` takes on `nodes` nodes of which `slow` are slow (k < n // 2).

    After round 1 at most u = 2k + (n mod 2) nodes are undecided (both members of each slow
    pair, and the odd node) and at least g = n - u are good; each later round decides
    min(u, g) of them and the good pool only grows.
    """
    undecided = 2 * slow + nodes % 2
    if undecided == 0:
        return 1
    return 1 + math.ceil(undecided / (nodes - undecided))


def _run(measure: Measure, groups: Sequence[Group], floor: float) -> list[bool]:
    """Whether each group met the floor; a measure that answers for the wrong groups is a bug."""
    results = list(measure(groups))
    if len(results) != len(groups):
        raise ValueError(f"measure returned {len(results)} results for {len(groups)} groups")
    return [busbw >= floor for busbw in results]


def find_slow_nodes(nodes: Sequence[str], measure: Measure, floor: float) -> SearchResult:
    """The nodes that pull a pair below `floor` (see the module docstring for rounds and exactness)."""
    names = list(dict.fromkeys(nodes))
    if len(names) < 2:
        raise ValueError("a network test needs at least two nodes")
    pairs = [(names[index], names[index + 1]) for index in range(0, len(names) - 1, 2)]
    good: list[str] = []
    undecided: list[str] = names[2 * len(pairs) :]
    for pair, passed in zip(pairs, _run(measure, pairs, floor), strict=True):
        (good if passed else undecided).extend(pair)
    rounds = 1
    if not good:
        return SearchResult(slow=(), rounds=rounds, unresolved=tuple(names))
    slow: list[str] = []
    while undecided:
        batch, undecided = undecided[: len(good)], undecided[len(good) :]
        groups = [(node, partner) for node, partner in zip(batch, good, strict=False)]
        rounds += 1
        for (node, _), passed in zip(groups, _run(measure, groups, floor), strict=True):
            (good if passed else slow).append(node)
    return SearchResult(slow=tuple(sorted(slow, key=names.index)), rounds=rounds)
