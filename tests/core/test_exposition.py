"""gpuforge.exposition: the one writer of Prometheus's text format (names checked, values escaped).

The escapes are the format document's (cited in the module); the real promtool of the monitoring
test root (tests/monitoring_tools.py) is the judge of what the written text means.
"""

from __future__ import annotations

import math
import subprocess

import pytest
from monitoring_tools import tool

from gpuforge.exposition import (
    ExpositionError,
    check_label_name,
    check_metric_name,
    family,
    help_text,
    label_value,
    sample,
)


@pytest.mark.parametrize(
    ("raw", "written"),
    [
        ("plain", "plain"),
        ('a"b', 'a\\"b'),
        ("a\\b", "a\\\\b"),
        ("a\nb", "a\\nb"),
        ('\\"', '\\\\\\"'),  # a backslash before a quote: both escaped, in that order
        ("tab\tcr\rnul\x00", "tab\tcr\rnul\x00"),  # the format escapes nothing else
        ("GPU é 🚀", "GPU é 🚀"),
        ("bad\udcffbyte", "bad\ufffdbyte"),  # a file name's byte that is not UTF-8
    ],
)
def test_label_values_escape_exactly_backslash_quote_and_line_feed(raw: str, written: str) -> None:
    assert label_value(raw) == written


def test_help_escapes_backslash_and_line_feed_only() -> None:
    assert help_text('say "hi"\\n\nnext') == 'say "hi"\\\\n\\nnext'


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a:b", "a b", "é", 'a"', "a\n"])
def test_metric_names_outside_the_exporters_set_are_refused(name: str) -> None:
    with pytest.raises(ExpositionError):
        check_metric_name(name)


@pytest.mark.parametrize("name", ["", "__name__", "__x", "1a", "a-b", "a:b", 'a"'])
def test_label_names_outside_the_set_or_reserved_are_refused(name: str) -> None:
    with pytest.raises(ExpositionError):
        check_label_name(name)


@pytest.mark.parametrize(
    ("value", "written"),
    [(0, "0"), (2**70, str(2**70)), (1.5, "1.5"), (math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf")],
)
def test_values_are_written_as_go_parses_them(value: float, written: str) -> None:
    assert sample("x", (), value) == f"x {written}"


def test_a_boolean_or_an_unknown_type_is_refused() -> None:
    with pytest.raises(ExpositionError):
        sample("x", (), True)
    with pytest.raises(ExpositionError):
        family("x", "counters", "help", ())


def test_promtool_reads_hostile_values_as_one_family_of_two_series() -> None:
    text = family(
        "gpuforge_test_total",
        "counter",
        "A test \\ counter\nwith a line feed in its help.",
        [
            ((("device", 'evil"} 1\nfake_series 1'), ("port", "1")), 3),
            ((("device", "\\"), ("port", "\n")), 4),
        ],
    )
    lines = text.splitlines()
    assert len(lines) == 4 and all(line.startswith("gpuforge_test_total{device=") for line in lines[2:])
    checked = subprocess.run(
        [str(tool("promtool")), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")
