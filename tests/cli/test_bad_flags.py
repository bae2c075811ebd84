"""Flag values that are bad input exit 2 (README's exit-code table) with the flag, the rule and the fix.

Each case is a value a CI job or a person could pass by mistake: an unset variable (`''`), a stray
comma, a region of the right shape that AWS does not have. They are refused while the flags are
read, before packer is looked for or AWS is called.
"""

from __future__ import annotations

import pytest

from gpuforge.cli import main

MATRIX = "images/matrices/g6-dev-cuda12.yaml"
BUILD = ["image", "build", MATRIX, "--region", "us-east-1"]

CASES = {
    "copy-to empty": ([*BUILD, "--copy-to", ""], "argument --copy-to", "has an empty item"),
    "copy-to comma": ([*BUILD, "--copy-to", ","], "argument --copy-to", "has an empty item"),
    "copy-to trailing comma": (
        [*BUILD, "--copy-to", "us-west-2,"],
        "argument --copy-to",
        "has an empty item",
    ),
    "copy-to unknown": (
        [*BUILD, "--copy-to", "us-east-9"],
        "argument --copy-to",
        "'us-east-9' is not a region AWS has",
    ),
    "copy-to one unknown": (
        [*BUILD, "--copy-to", "us-west-2,eu-mars-1"],
        "argument --copy-to",
        "'eu-mars-1' is not a region AWS has",
    ),
    "share-with empty": ([*BUILD, "--share-with", ""], "argument --share-with", "has an empty item"),
    "build region": (
        ["image", "build", MATRIX, "--region", "us-east-9"],
        "argument --region",
        "not a region AWS has",
    ),
    "render region": (
        ["image", "render", MATRIX, "--out", "/nonexistent/out", "--region", "xx-east-1"],
        "argument --region",
        "not a region AWS has",
    ),
    "verify region": (
        ["image", "verify", "ami-0123456789abcdef0", "--matrix", MATRIX, "--region", ""],
        "argument --region",
        "an empty region name",
    ),
    "prune region": (
        ["image", "prune", "--region", "us-east-9"],
        "argument --region",
        "not a region AWS has",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_flag_value_is_exit_2_naming_the_flag_and_the_fix(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, flag, rule = CASES[case]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "Traceback" not in err
    assert flag in err and rule in err and "Fix:" in err, err
