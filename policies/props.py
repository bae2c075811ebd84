"""Reading resource properties the way the engine hands them to a policy.

Props arrive as pulumi_policy's read-only proxies (Mapping and Sequence, not dict and
list), camelCased, with numbers as floats. During `pulumi preview` a value that
comes from a resource created in the same stack is unknown. These readers never
trip over an unknown: they return `UNKNOWN` so that each rule decides what an
unknown means for it. Values the AWS provider reports for unset attributes (empty
strings, for instance in outputs) count as unset.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpuforge.policies.engine_adapter import MISSING, UNKNOWN, Sentinel, Unknown, elements, lookup

__all__ = [
    "MISSING",
    "UNKNOWN",
    "Unknown",
    "at",
    "flag",
    "integer",
    "is_set",
    "items",
    "show",
    "snake",
    "text",
    "text_or_texts",
    "texts",
]


def at(props: Any, *path: str | int) -> Any:
    """The value at `path` inside `props`; stops at the first `UNKNOWN` or `MISSING`."""
    value = props
    for key in path:
        if value is UNKNOWN or value is MISSING:
            return value
        value = lookup(value, key)
    return value


def is_set(value: Any) -> bool:
    """True for any value a person set, known or not; False for missing, None and ""."""
    return value is not MISSING and value is not None and value != ""


def text(value: Any) -> str | Unknown | None:
    """A string value, `UNKNOWN`, or None when unset."""
    if value is UNKNOWN:
        return Sentinel.UNKNOWN
    if not is_set(value):
        return None
    return str(value)


def flag(value: Any) -> bool | Unknown | None:
    """A boolean the provider takes as bool (instances) or as "true"/"false" (launch templates)."""
    if value is UNKNOWN:
        return Sentinel.UNKNOWN
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def integer(value: Any) -> int | Unknown | None:
    """A whole number (the wire carries numbers as floats), `UNKNOWN`, or None when unset."""
    if value is UNKNOWN:
        return Sentinel.UNKNOWN
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def items(value: Any) -> list[Any]:
    """The elements of a list property (each a value or `UNKNOWN`); [] when unset.

    A list that is unknown as a whole comes back as [UNKNOWN].
    """
    if value is UNKNOWN:
        return [UNKNOWN]
    if not is_set(value) or isinstance(value, str) or not isinstance(value, Sequence):
        return []
    return elements(value)


def texts(value: Any) -> list[str | Unknown]:
    """The set elements of a list of strings, each a string or `UNKNOWN`."""
    found: list[str | Unknown] = []
    for item in items(value):
        value_text = text(item)
        if value_text is not None:
            found.append(value_text)
    return found


def snake(name: str) -> str:
    """A camelCased property name as Python programs write it: `imageId` -> `image_id`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def show(value: Any) -> str:
    """A value as messages quote it: `'optional'`, `unset`, `not known at preview`."""
    if value is UNKNOWN:
        return "not known at preview"
    if not is_set(value):
        return "unset"
    return repr(value)


def text_or_texts(value: Any) -> list[str | Unknown]:
    """A property that holds one string or a list of them (the provider flattens some one-item lists)."""
    if value is UNKNOWN:
        return [UNKNOWN]
    if isinstance(value, str):
        return [value] if value else []
    return texts(value)
