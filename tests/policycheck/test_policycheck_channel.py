"""The parent's side of the child protocol: only a complete record with the run's nonce, from a child that
exited 0, is a result; everything else says what happened instead (the message `check` shows)."""

from __future__ import annotations

import pytest

from gpuforge.policycheck.channel import ChildFailed, ChildRecord, ErrorWire, _accept

NONCE = "0123456789abcdef"


def _record(**fields: object) -> bytes:
    return ChildRecord.model_validate({"nonce": NONCE, **fields}).model_dump_json().encode()


def test_a_complete_record_from_a_clean_exit_is_accepted() -> None:
    record = _accept(_record(outputs={"a": 1}), 0, NONCE)
    assert record.outputs == {"a": 1} and record.error is None


@pytest.mark.parametrize(
    ("data", "status", "how"),
    [
        (b"", 0, "its process exited with status 0 before it sent gpuforge a result"),
        (b"", -9, "its process was killed by SIGKILL before it sent gpuforge a result"),
        (_record()[:-3], 0, "the result it sent is not one gpuforge's run writes"),
        (_record() + _record(), 0, "the result it sent is not one gpuforge's run writes"),
        (_record().replace(NONCE.encode(), b"f" * 16), 0, "another run's nonce"),
        (_record(), 3, "its process exited with status 3 after it sent its result"),
        # An error record may not carry the codes that mean "checked": 0 and 1 are the parent's.
        (_record().replace(b'"error":null', b'"error":{"message":"ok","exit_code":0}'), 0, "error.exit_code"),
        (_record().replace(b'"outputs":{}', b'"outputs":{},"verdict":"pass"'), 0, "verdict"),
    ],
)
def test_anything_else_is_refused_saying_what_happened(data: bytes, status: int, how: str) -> None:
    with pytest.raises(ChildFailed) as failed:
        _accept(data, status, NONCE)
    assert how in failed.value.how


def test_an_error_record_keeps_its_exit_code() -> None:
    data = _record(error=ErrorWire(message="bad", exit_code=2).model_dump())
    record = _accept(data, 0, NONCE)
    assert record.error is not None and record.error.exit_code == 2
