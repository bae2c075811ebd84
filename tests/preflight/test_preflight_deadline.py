"""`preflight --timeout`: one deadline bounds every AWS wait, and the report is still printed.

The endpoint is a socket on 127.0.0.1 that accepts and never answers (AWS_ENDPOINT_URL, which boto3 honours):
no real AWS service behaves so, and moto answers at once, so a plain socket is the only way to show it. Before
the deadline each call waited botocore's 60 s read timeout three times over, check after check. The command runs
in a process of its own and the bound is the subprocess timeout (the deadline plus a margin for starting Python
on a loaded machine), not a timed assertion.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 10
START_MARGIN_S = 120


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An endpoint that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=10)
    for connection in held:
        connection.close()
    listener.close()


def test_a_silent_endpoint_fails_the_checks_at_the_deadline_and_the_report_is_printed(
    tmp_path: Path, silent_endpoint: str
) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_ENDPOINT_URL": silent_endpoint,
    }
    stack = REPO / "stacks" / "training"
    args = ["preflight", str(stack), "--stack", "p5-prod", "--json", "--timeout", str(DEADLINE_S)]
    done = subprocess.run(
        [sys.executable, "-m", "gpuforge.cli", *args],
        cwd=tmp_path,  # not the checkout: `-m` would import its gpuforge folder, not the installed package
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + START_MARGIN_S,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    checks = {check["id"]: check for check in json.loads(done.stdout)["checks"]}
    said = [check["message"] for check in checks.values() if check["status"] == "fail"]
    assert any(f"no answer within the command's deadline of {DEADLINE_S} s (--timeout)" in m for m in said), (
        said
    )
    assert any(m.startswith("not run: the command's deadline") for m in said), said
