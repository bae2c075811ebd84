"""Reading IAM policy documents (identity policies and bucket policies) the way AWS reads them.

A document reaches a policy as the JSON string the program wrote (the provider
takes `policy` as a string), or, from a program that passes an object, as a
mapping. AWS accepts a single value or a list almost everywhere: `Statement`
is one statement or a list of them, and `Action`, `NotAction`, `Resource`,
`NotResource` and each principal list are one string or a list of strings.
`statements` flattens all of that, so the rules compare plain tuples.
Source: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_grammar.html

The text goes through the project's one JSON parser (`gpuforge.loading.parse_json`),
so a document with a duplicate key, which IAM would read one way and a reviewer
another, is refused like any other bad JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuforge.errors import InputError
from gpuforge.loading import parse_json
from gpuforge.policies.engine_adapter import Sentinel, elements
from gpuforge.policies.props import UNKNOWN, Unknown, at, is_set

ANYONE = "*"


@dataclass(frozen=True)
class Statement:
    """One statement of a policy document, with every element that may be a list read as a tuple."""

    index: int
    sid: str | None
    effect: str
    actions: tuple[str, ...]
    not_actions: tuple[str, ...]
    resources: tuple[str, ...]
    not_resources: tuple[str, ...]
    principal: Any
    condition: Mapping[str, Any]

    @property
    def name(self) -> str:
        """How messages name the statement: `Statement[1] ('PublicRead')`."""
        return f"Statement[{self.index}]" + (f" ({self.sid!r})" if self.sid else "")

    @property
    def allows(self) -> bool:
        return self.effect == "Allow"

    @property
    def for_anyone(self) -> bool:
        """Principal `"*"` or `{"AWS": "*"}` (also in a list): every principal, anonymous ones included.

        Source: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html
        """
        if self.principal == ANYONE:
            return True
        return isinstance(self.principal, Mapping) and ANYONE in strings(self.principal.get("AWS"))


def strings(value: Any) -> tuple[str, ...]:
    """A policy element that is one string or a list of strings, as a tuple; () when absent."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(str(item) for item in value)
    return (str(value),)


def _plain(value: Any) -> Any:
    """A proxied props value as plain dicts and lists; `UNKNOWN` if any part is unknown at preview."""
    if value is UNKNOWN:
        return UNKNOWN
    if isinstance(value, str) or not isinstance(value, Mapping | Sequence):
        return value
    if isinstance(value, Mapping):
        keys = list(value.keys())
        items = [_plain(at(value, key)) for key in keys]
        return UNKNOWN if UNKNOWN in items else dict(zip(keys, items, strict=True))
    parts = [_plain(item) for item in elements(value)]
    return UNKNOWN if UNKNOWN in parts else parts


def document(value: Any, where: str) -> Mapping[str, Any] | Unknown | None:
    """The document a `policy` property holds: a mapping, `UNKNOWN`, or None when unset.

    Raises InputError, naming `where`, when the text is not JSON or not a JSON object.
    """
    if value is UNKNOWN:
        return Sentinel.UNKNOWN
    if not is_set(value):
        return None
    fix = "write the policy as a JSON object (json.dumps of a dict, or aws.iam.get_policy_document)"
    parsed = parse_json(value, source=where, fix=fix) if isinstance(value, str) else _plain(value)
    if parsed is UNKNOWN:
        return Sentinel.UNKNOWN
    if not isinstance(parsed, Mapping):
        raise InputError(f"{where}: the policy is a {type(parsed).__name__}, not a JSON object. Fix: {fix}.")
    return parsed


def statements(parsed: Mapping[str, Any]) -> list[Statement]:
    """Every statement of a parsed document, in order (a single statement counts as a list of one)."""
    raw = parsed.get("Statement")
    listed = [raw] if isinstance(raw, Mapping) else list(raw) if isinstance(raw, Sequence) else []
    found = []
    for index, entry in enumerate(listed):
        if not isinstance(entry, Mapping):
            continue  # IAM refuses such a document; nothing in it grants anything
        condition = entry.get("Condition")
        found.append(
            Statement(
                index=index,
                sid=str(entry["Sid"]) if entry.get("Sid") else None,
                effect=str(entry.get("Effect", "")),
                actions=strings(entry.get("Action")),
                not_actions=strings(entry.get("NotAction")),
                resources=strings(entry.get("Resource")),
                not_resources=strings(entry.get("NotResource")),
                principal=entry.get("Principal"),
                condition=condition if isinstance(condition, Mapping) else {},
            )
        )
    return found
