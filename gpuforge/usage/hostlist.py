"""Slurm's compressed host lists (`gpu-[1-3,7],ctl`), read without ever holding more names than a cluster has.

sacct's `nodes` and sacctmgr's `NodeName` print the nodes of a job or an event this way. A list is
text from a file, so `p5-[0-99999999]` costs nothing to write and would take minutes and gigabytes
to expand. The bound: no list may name more nodes than the largest cluster gpuforge builds
(MAX_HOSTS, the nodes one subnet holds: gpuforge.subnet_limits), counted before anything is
expanded; and a job's list is matched against the nodes that had events without expanding it at all
(NodeIndex), so a job on every node costs a lookup, not a walk.

Forms read: plain names, and one bracket group per name of comma-separated numbers and ranges
(`n[08-10]` keeps the zero padding of the range's low end, as Slurm prints it). A bracket group that is
not that (`n[5-1]`, `n[a-b]`, more than 18 digits) is taken as a plain name, as written.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpuforge.display import cut
from gpuforge.subnet_limits import MAX_NODE_COUNT

MAX_HOSTS = MAX_NODE_COUNT  # the nodes of the largest cluster gpuforge builds
_MAX_DIGITS = 18  # a node number Slurm prints fits in 64 bits
_PARTS = re.compile(r"[^,\[]+(?:\[[^\]]*\])?[^,]*")
_BRACKET = re.compile(r"([^\[]*)\[([^\]]*)\](.*)")
_ITEM = re.compile(rf"(\d{{1,{_MAX_DIGITS}}})(?:-(\d{{1,{_MAX_DIGITS}}}))?", re.ASCII)
_DIGITS = re.compile(r"\d+", re.ASCII)
_DIGIT_CHARS = "0123456789"


class TooManyHosts(ValueError):
    """A host list naming more nodes than it may (at most the largest cluster gpuforge builds)."""

    def __init__(self, hostlist: str, count: int, limit: int) -> None:
        super().__init__(f"{cut(hostlist)} names {count} nodes, more than the {limit} it may")
        self.count = count


@dataclass(frozen=True)
class _Part:
    """One comma-separated part: a plain name (no ranges) or prefix[ranges]suffix."""

    prefix: str
    ranges: tuple[tuple[int, int, int], ...] = ()  # (low, high, width of low)
    suffix: str = ""

    def count(self) -> int:
        return 1 if not self.ranges else sum(high - low + 1 for low, high, _ in self.ranges)

    def names(self) -> Iterator[str]:
        if not self.ranges:
            yield self.prefix
        for low, high, width in self.ranges:
            for number in range(low, high + 1):
                yield f"{self.prefix}{number:0{width}d}{self.suffix}"


def _part(text: str) -> _Part:
    match = _BRACKET.fullmatch(text)
    if match is None:
        return _Part(text)
    prefix, body, suffix = match.groups()
    ranges = []
    for item in body.split(","):
        bounds = _ITEM.fullmatch(item)
        if bounds is None:
            return _Part(text)
        low = int(bounds.group(1))
        high = int(bounds.group(2)) if bounds.group(2) is not None else low
        if high < low:
            return _Part(text)
        ranges.append((low, high, len(bounds.group(1))))
    return _Part(prefix, tuple(ranges), suffix)


def parts(hostlist: str) -> list[_Part]:
    return [_part(text) for text in _PARTS.findall(hostlist)]


def count_hosts(hostlist: str) -> int:
    """How many names the list holds, without expanding it."""
    return sum(part.count() for part in parts(hostlist))


def expand_hostlist(hostlist: str, limit: int = MAX_HOSTS) -> list[str]:
    """The list's names; TooManyHosts (a ValueError) when it holds more than `limit`, before expanding."""
    found = parts(hostlist)
    count = sum(part.count() for part in found)
    if count > limit:
        raise TooManyHosts(hostlist, count, limit)
    return [name for part in found for name in part.names()]


class NodeIndex:
    """Node names (those that had events), found by the host lists that name them without expanding a list.

    Each name is filed under the (prefix, suffix) around each of its runs of digits, with the run, so
    `prefix[low-high]suffix` as Slurm prints it (the whole number in the brackets) is a binary search
    in one sorted list. A list whose prefix ends or whose suffix starts with digits (`n1[0-9]`) is
    matched against the names filed under the same letters, one by one.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._plain = set(names)
        ranged: dict[tuple[str, str], list[tuple[int, str, str]]] = {}
        for name in self._plain:
            for run in _DIGITS.finditer(name):
                if len(run.group()) <= _MAX_DIGITS:
                    key = (name[: run.start()], name[run.end() :])
                    ranged.setdefault(key, []).append((int(run.group()), run.group(), name))
        for entries in ranged.values():
            entries.sort()
        self._ranged = ranged

    def named_by(self, hostlist: str) -> Iterator[str]:
        """The indexed names that `hostlist` holds."""
        for part in parts(hostlist):
            if not part.ranges:
                if part.prefix in self._plain:
                    yield part.prefix
                continue
            head = part.prefix.rstrip(_DIGIT_CHARS)
            tail = part.suffix.lstrip(_DIGIT_CHARS)
            entries = self._ranged.get((head, tail), [])
            if head == part.prefix and tail == part.suffix:
                yield from self._search(entries, part)
            else:
                yield from self._scan(
                    entries, part, part.prefix[len(head) :], part.suffix[: len(part.suffix) - len(tail)]
                )

    @staticmethod
    def _search(entries: list[tuple[int, str, str]], part: _Part) -> Iterator[str]:
        for low, high, width in part.ranges:
            at = bisect.bisect_left(entries, (low, "", ""))
            while at < len(entries) and entries[at][0] <= high:
                number, digits, name = entries[at]
                if digits == f"{number:0{width}d}":
                    yield name
                at += 1

    @staticmethod
    def _scan(entries: list[tuple[int, str, str]], part: _Part, before: str, after: str) -> Iterator[str]:
        for _, digits, name in entries:
            middle = digits[len(before) : len(digits) - len(after)]
            if not (middle and digits.startswith(before) and digits.endswith(after)):
                continue
            number = int(middle)
            if any(
                low <= number <= high and middle == f"{number:0{width}d}" for low, high, width in part.ranges
            ):
                yield name
