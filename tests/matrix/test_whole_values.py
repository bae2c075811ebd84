"""Every pinned value is read whole, in ASCII: a trailing newline or a Unicode digit is an error.

`$` under re.match accepts a value that ends in a newline, and `\\d` accepts any Unicode digit;
either would carry a value the image build then passes to apt-get, curl or Packer as written.
"""

from __future__ import annotations

from typing import Any

import pytest
from matrix_cases import rules

# (where in the matrix, the rule that must refuse the spoiled value)
FIELDS: list[tuple[tuple[str, ...], str]] = [
    (("cuda",), "pin.exact"),
    (("kernel",), "pin.exact"),
    (("nvidia", "driver"), "pin.exact"),
    (("nccl",), "pin.exact"),
    (("efa", "sha256"), "pin.sha256"),
    (("slurm", "url"), "pin.url"),
]


def _set(data: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _get(data: dict[str, Any], path: tuple[str, ...]) -> str:
    for key in path:
        data = data[key]
    return str(data)


@pytest.mark.parametrize(("path", "rule"), FIELDS, ids=lambda v: ".".join(v) if isinstance(v, tuple) else v)
@pytest.mark.parametrize("spoil", ["newline", "crlf"])
def test_a_value_with_a_trailing_line_break_is_refused(
    h100: dict[str, Any], path: tuple[str, ...], rule: str, spoil: str
) -> None:
    _set(h100, path, _get(h100, path) + ("\n" if spoil == "newline" else "\r\n"))
    assert rule in rules(h100)


@pytest.mark.parametrize(
    ("path", "rule"),
    [(("cuda",), "pin.exact"), (("nvidia", "driver"), "pin.exact"), (("kernel",), "pin.exact")],
    ids=["cuda", "driver", "kernel"],
)
def test_a_unicode_digit_is_not_a_digit(h100: dict[str, Any], path: tuple[str, ...], rule: str) -> None:
    # The ARABIC-INDIC digit of the same value (U+0660 + n): `\d` matches it, [0-9] does not.
    value = _get(h100, path)
    first = next(i for i, char in enumerate(value) if char in "0123456789")
    _set(h100, path, value[:first] + chr(0x660 + int(value[first])) + value[first + 1 :])
    assert rule in rules(h100)


@pytest.mark.parametrize("region_or_ami", ["region", "ami"])
def test_a_base_ami_key_or_id_with_a_trailing_newline_is_refused(
    h100: dict[str, Any], region_or_ami: str
) -> None:
    (region, ami), *_ = h100["os"]["base_ami"].items()
    h100["os"]["base_ami"] = {f"{region}\n": ami} if region_or_ami == "region" else {region: f"{ami}\n"}
    assert "pin.base-ami" in rules(h100)
