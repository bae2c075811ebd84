"""Property: `validate report` on any text never tracebacks, ends in bounded time, and never
PASSes a file that holds no complete valid run.

The files are arbitrary text, or a published output (tests/fixtures/validate, sources in its
README.md) with one destructive edit made here: cut before its closing line, a promised row
dropped, a rank's line dropped, or one field of a row replaced by a token that is no figure.
Each edit leaves no complete valid run, so a PASS on any of them is a false pass.
"""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from fuzzing import FUZZ, bounded
from hypothesis import given
from hypothesis import strategies as st

from gpuforge.cli import main
from gpuforge.validate.nccl import REDUCTIONS, TYPE_BYTES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
H100 = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
DIAG = (FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_text(encoding="utf-8")
LINES = H100.splitlines()
ROWS = [i for i, line in enumerate(LINES) if line[:1] == " " and line.split()[0].isdigit()]
RANKS = [i for i, line in enumerate(LINES) if " Rank " in line]


def _no_figure(token: str) -> bool:
    """True when `token` cannot stand in any column of an all-reduce row."""
    if token in TYPE_BYTES or token in REDUCTIONS or token == "-1":
        return False
    try:
        value = float(token)
    except ValueError:
        return True
    return not math.isfinite(value) or value < 0


_TOKENS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1.5", "1.2.3", "1e", "N/A", "0x10", "\u0661\u0662"]),
    st.text(st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")), min_size=1, max_size=12),
).filter(_no_figure)


def _without(index: int) -> str:
    return "\n".join(line for i, line in enumerate(LINES) if i != index) + "\n"


def _replaced(row: int, column: int, token: str) -> str:
    words = LINES[row].split()
    words[column] = token
    return "\n".join([*LINES[:row], "  ".join(words), *LINES[row + 1 :]]) + "\n"


BROKEN = st.one_of(
    st.integers(0, H100.index("# Avg bus bandwidth") - 1).map(lambda cut: H100[:cut]),
    st.sampled_from(ROWS).map(_without),
    st.sampled_from(RANKS).map(_without),
    st.builds(_replaced, st.sampled_from(ROWS), st.integers(0, 12), _TOKENS),
    st.integers(0, DIAG.rindex("+---") - 1).map(lambda cut: DIAG[:cut]),
    st.text(max_size=400),
    st.binary(max_size=400).map(lambda data: data.decode("latin-1")),
)


@pytest.mark.parametrize("text", [H100, DIAG], ids=["published nccl-tests run", "published dcgmi table"])
def test_the_published_outputs_pass(text: str, tmp_path: Path) -> None:
    assert _judge(tmp_path, text) == 0


@FUZZ
@given(text=BROKEN)
def test_no_traceback_and_no_pass_without_a_complete_valid_run(text: str, tmp_path: Path) -> None:
    codes: list[int] = []
    bounded(lambda: codes.append(_judge(tmp_path, text)))
    assert codes and codes[0] in (1, 2), f"exit {codes} for {text[:200]!r}"


def _judge(tmp_path: Path, text: str) -> int:
    path = tmp_path / "out.txt"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["validate", "report", "--instance-type", "p4d.24xlarge", "--nodes", "2", str(path)])
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code
