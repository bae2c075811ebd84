"""The property tests' shared parts: hypothesis settings, hostile documents, and the time bound.

A fixed number of examples runs in the suite; more in a documented command:

    GPUFORGE_FUZZ_EXAMPLES=20000 .venv/bin/pytest tests/core/test_hostile_input.py tests/policycheck/test_policycheck_hostile.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gpuforge.errors import GpuforgeError

EXAMPLES = int(os.environ.get("GPUFORGE_FUZZ_EXAMPLES", "60"))
SECONDS_PER_INPUT = 5.0
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the bound is checked against wall time (bounded), with a clear message
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
VALUES = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)
ENCODINGS = st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1", "utf-8-sig"])


def deep(depth: int, opener: str, closer: str) -> str:
    return opener * depth + closer * depth


def alias_bomb(levels: int) -> str:
    """Nested YAML anchors ("billion laughs"): nine times more nodes per level."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def yaml_texts(base: dict[str, Any]) -> st.SearchStrategy[str]:
    """Documents that look like `base` with a random part replaced, plus purely hostile ones."""
    keys = sorted(base)
    mutated = st.builds(
        lambda key, value: yaml.safe_dump({**base, key: value}, sort_keys=False),
        st.sampled_from(keys),
        VALUES,
    )
    duplicated = st.builds(
        lambda key: yaml.safe_dump(base, sort_keys=False) + f"{key}: again\n", st.sampled_from(keys)
    )
    return st.one_of(
        mutated,
        duplicated,
        st.builds(yaml.safe_dump, VALUES),
        st.integers(1, 6000).map(lambda n: deep(n, "[", "]")),
        st.integers(1, 6000).map(lambda n: "a: " + deep(n, "{x: ", "}")),
        st.integers(2, 12).map(alias_bomb),
        st.text(max_size=200),
    )


def encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace")


def bounded(call: Callable[[], object]) -> None:
    """`call` returns or raises GpuforgeError, within SECONDS_PER_INPUT; anything else fails the test."""
    started = time.monotonic()
    try:
        call()
    except GpuforgeError as error:
        assert "Traceback" not in error.message
    elapsed = time.monotonic() - started
    assert elapsed < SECONDS_PER_INPUT, f"took {elapsed:.1f} s"
