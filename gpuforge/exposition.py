"""Prometheus's text exposition format, written in one place: names checked, label values and HELP escaped.

Every series gpuforge writes for Prometheus (the node agent's textfile for node_exporter,
gpuforge.node.efa_metrics) is formatted here, never by hand at a call site. Label values come from
the node (sysfs device names, `nvidia-smi topo -m`, the job mapping files): written raw, a value
holding `"`, `}` or a line feed ends the label early and forges labels or whole series
(`x"} 1\\nfake_series 1`).

The rules, from the format's document (prometheus/docs docs/instrumenting/exposition_formats.md at
1c7e30794a6442249d6aa3bd787ff43ff64cdfd2, "Text format details"): "`label_value` can be any sequence
of UTF-8 characters, but the backslash (`\\`), double-quote (`"`), and line feed (`\\n`) characters
have to be escaped as `\\\\`, `\\"`, and `\\n`, respectively"; a HELP docstring escapes "the
backslash and the line feed characters ... as `\\\\` and `\\n`"; lines end in a line feed; a value is
a Go float, with `NaN`, `+Inf` and `-Inf`. No other escape exists: node_exporter's textfile collector
(prometheus/common expfmt's text parser) refuses any other backslash sequence, so nothing else is
escaped. Names: the data model (prometheus/docs docs/concepts/data_model.md at
8a1a1586f61e3fa36c5f49349e5de54029316c9a) recommends `[a-zA-Z_:][a-zA-Z0-9_:]*` for metric names
(colons "reserved for user-defined recording rules", so "SHOULD NOT be used by exporters") and
`[a-zA-Z_][a-zA-Z0-9_]*` for label names, `__` reserved for Prometheus. Names outside those sets
need the quoted syntax that Prometheus 3 added; gpuforge writes none, so such a name is refused
(ExpositionError) rather than quoted.

Standard library only: the node agent imports it on bare GPU nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

# Exporters' metric names: the data model's set without the colon (reserved for recording rules).
_METRIC_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
# Lone surrogates: what Python makes of bytes that are not UTF-8 in a file name (os.fsdecode).
_SURROGATE = re.compile("[\ud800-\udfff]")

Labels = Sequence[tuple[str, str]]


class ExpositionError(ValueError):
    """A metric or label name, or a type, that the text format cannot carry unquoted."""


def label_value(value: str) -> str:
    """`value` escaped for the inside of a label's double quotes: backslash, double quote, line feed.

    A lone surrogate (a file name's byte that is not UTF-8) becomes U+FFFD: the format is UTF-8,
    and one unencodable character must not stop the whole file from being written.
    """
    text = _SURROGATE.sub("\ufffd", value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def help_text(text: str) -> str:
    """A HELP docstring escaped as the format requires: backslash and line feed."""
    return _SURROGATE.sub("\ufffd", text).replace("\\", "\\\\").replace("\n", "\\n")


def is_metric_name(name: str) -> bool:
    """Whether an exporter may write `name` as a metric name unquoted (letters, digits, `_`; no leading digit)."""
    return _METRIC_NAME.match(name) is not None


def check_metric_name(name: str) -> str:
    if not is_metric_name(name):
        raise ExpositionError(f"{name!r} is not a metric name an exporter writes ([a-zA-Z_][a-zA-Z0-9_]*)")
    return name


def check_label_name(name: str) -> str:
    if _LABEL_NAME.match(name) is None or name.startswith("__"):
        raise ExpositionError(
            f"{name!r} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __, which Prometheus reserves)"
        )
    return name


def value_text(value: float) -> str:
    """A sample value as Go's ParseFloat reads it: integers exact, NaN and the infinities by name."""
    if isinstance(value, bool):
        raise ExpositionError(f"{value!r} is not a sample value (a number)")
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def sample(metric: str, labels: Labels, value: float) -> str:
    """One sample line, `metric{name="value",...} value`, without its line feed."""
    pairs = ",".join(f'{check_label_name(name)}="{label_value(text)}"' for name, text in labels)
    body = f"{{{pairs}}}" if pairs else ""
    return f"{check_metric_name(metric)}{body} {value_text(value)}"


def family(metric: str, kind: str, help_: str, samples: Iterable[tuple[Labels, float]]) -> str:
    """One metric family: its HELP and TYPE lines, then its samples, each line ended by a line feed."""
    if kind not in _TYPES:
        raise ExpositionError(f"{kind!r} is not a metric type ({', '.join(sorted(_TYPES))})")
    lines = [
        f"# HELP {check_metric_name(metric)} {help_text(help_)}",
        f"# TYPE {metric} {kind}",
        *(sample(metric, labels, value) for labels, value in samples),
    ]
    return "".join(f"{line}\n" for line in lines)
