"""A small HCL2 writer whose output is already in `packer fmt` form.

The rendered templates are reviewed by people and checked with `packer fmt
-check`, so the writer follows the formatter's layout: two-space indents, one
space around `=`, and the `=` of consecutive one-line attributes aligned. A line
that opens a multi-line map or list, a nested block, a comment or a blank line
ends an alignment group, as it does in the formatter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

INDENT = "  "


@dataclass(frozen=True)
class Expr:
    """A raw HCL expression written as given, such as a template with `${path.root}`."""

    text: str


Value = str | int | bool | Expr | Sequence["Value"] | Mapping[str, "Value"]


@dataclass(frozen=True)
class Attr:
    name: str
    value: Value


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Blank:
    pass


@dataclass(frozen=True)
class Block:
    type: str
    labels: tuple[str, ...] = ()
    body: tuple[Item, ...] = ()


Item = Attr | Comment | Blank | Block


def quote(text: str) -> str:
    """An HCL string literal; `${` and `%{` are escaped so text is never read as a template."""
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
        .replace("${", "$${")
        .replace("%{", "%%{")
    )
    return f'"{escaped}"'


def _scalar(value: str | int | Expr) -> str:
    if isinstance(value, Expr):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return quote(value)


def _value_lines(value: Value, depth: int) -> list[str]:
    """The value as lines; the first continues the `name = ` line, the rest are fully indented."""
    if isinstance(value, str | int | Expr):
        return [_scalar(value)]
    pad = INDENT * depth
    if isinstance(value, Mapping):
        if not value:
            return ["{}"]
        inner = _aligned([(quote(key), item) for key, item in value.items()], depth + 1)
        return ["{", *inner, pad + "}"]
    items = list(value)
    if len(items) <= 1:
        return ["[" + ", ".join(_single_line(item) for item in items) + "]"]
    inner_pad = INDENT * (depth + 1)
    return ["[", *(f"{inner_pad}{_single_line(item)}," for item in items), pad + "]"]


def _single_line(value: Value) -> str:
    lines = _value_lines(value, 0)
    if len(lines) != 1:
        raise ValueError(f"a list item must fit on one line: {value!r}")
    return lines[0]


def _aligned(pairs: Sequence[tuple[str, Value]], depth: int) -> list[str]:
    """Key/value lines with the `=` of each run of one-line values aligned."""
    pad = INDENT * depth
    out: list[str] = []
    run: list[tuple[str, str]] = []

    def flush() -> None:
        width = max((len(key) for key, _ in run), default=0)
        out.extend(f"{pad}{key.ljust(width)} = {text}" for key, text in run)
        run.clear()

    for key, value in pairs:
        lines = _value_lines(value, depth)
        if len(lines) == 1:
            run.append((key, lines[0]))
            continue
        flush()
        out.append(f"{pad}{key} = {lines[0]}")
        out.extend(lines[1:])
    flush()
    return out


def _body(items: Sequence[Item], depth: int) -> list[str]:
    pad = INDENT * depth
    out: list[str] = []
    attrs: list[tuple[str, Value]] = []

    def flush() -> None:
        out.extend(_aligned(attrs, depth))
        attrs.clear()

    for item in items:
        if isinstance(item, Attr):
            attrs.append((item.name, item.value))
            continue
        flush()
        if isinstance(item, Blank):
            out.append("")
        elif isinstance(item, Comment):
            out.append(f"{pad}# {item.text}" if item.text else f"{pad}#")
        else:
            header = " ".join([item.type, *(quote(label) for label in item.labels)])
            out.append(f"{pad}{header} {{")
            out.extend(_body(item.body, depth + 1))
            out.append(f"{pad}}}")
    flush()
    return out


def render(items: Sequence[Item]) -> str:
    """A complete HCL file."""
    return "\n".join(_body(items, 0)) + "\n"
