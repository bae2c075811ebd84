"""One shape for every rejection the components make.

A component refuses bad input at construction, before any resource is
registered, so a failed `pulumi up` leaves nothing half-created. Each message
names the input, the value found, the rule it broke and the fix, so the person
reading it can act without opening the code.
"""

from __future__ import annotations

from pydantic import ValidationError

from gpuforge.errors import InputError


def invalid(field: str, value: object, rule: str, fix: str, *, source: str | None = None) -> InputError:
    """An InputError for `field`, which holds `value` and breaks `rule`; `fix` says what to do."""
    message = f"{field} = {value!r}: {rule}. Fix: {fix}."
    if source:
        message += f" (source: {source})"
    return InputError(message)


def from_validation_error(model: str, error: ValidationError) -> InputError:
    """Every problem pydantic found in one `model`, as one InputError."""
    lines = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"]) or "(whole object)"
        lines.append(f"  {model}.{field} = {detail.get('input')!r}: {detail['msg']}")
    return InputError(
        f"{model} is invalid:\n"
        + "\n".join(lines)
        + f"\nFix: correct the fields above; the {model} docstring lists each field and its rule."
    )
