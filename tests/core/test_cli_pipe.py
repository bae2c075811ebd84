"""A reader that stops reading (`gpuforge ... --json | head -1`) ends the command quietly, as it ends a shell
tool, not in a BrokenPipeError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuforge.cli import BROKEN_PIPE

H100 = Path(__file__).resolve().parents[1] / "fixtures" / "validate" / "nccl-h100-2node-gcp-a3mega.txt"


def test_a_closed_pipe_ends_the_command_without_a_traceback(tmp_path: Path) -> None:
    # Twenty copies of a real capture: about 200 KB of JSON, more than a pipe holds, so the writer meets the
    # closed end while it still has output to write.
    args = [
        "validate",
        "report",
        "--instance-type",
        "p4d.24xlarge",
        "--nodes",
        "2",
        *[str(H100)] * 20,
        "--json",
    ]
    with subprocess.Popen(
        [sys.executable, "-m", "gpuforge.cli", *args],
        cwd=tmp_path,  # not the checkout: `-m` would import its gpuforge folder, not the installed package
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == "{\n"
        process.stdout.close()
        err = process.stderr.read()
        code = process.wait(timeout=120)
    assert code == BROKEN_PIPE, err
    assert err == ""
