"""The program runs in a child process; what it registered comes back over a pipe the parent made.

Why a child: a program checked in gpuforge's own process could end that process with
a success code before the verdict (`posix._exit(0)`, `os.execv`), change it afterwards
(an `atexit` handler that exits 0), or replace the functions that compute it. So the
parent (`check`) only reads files and decides; the child (`child.main`) only runs the
program under the mocks and sends back its record: the resources it registered, its
AMI lookups and its stack outputs, or the error that stopped it. The parent runs the
policy pack on that record and chooses the exit code.

The protocol, one way each:

- parent -> child, on the child's stdin: one `ChildRequest` (JSON), holding a random
  nonce; the child reads it whole before the program starts and gives the program an
  empty stdin;
- child -> parent, on the pipe whose write end the parent passed (its descriptor number
  is the child's one argument; the child makes it close on exec): one `ChildRecord`
  (JSON) carrying the same nonce, then the child ends with `os._exit(0)`, bound
  before the program ran, so no exit handler of the program runs.

The parent accepts the record only when it is one well-formed document with that nonce
and the child exited 0. Anything else (no record, a broken or forged one, a signal, a
process that replaced itself) is bad input naming what happened: exit 2, as for a
program that raises. The program's own output goes to stderr (the child's stdout is
its stderr), so stdout carries gpuforge's result alone.

What this does not stop: a program that searches the child's memory for the pipe and
the nonce and writes a well-formed record of its own. In-process, a program can do
whatever the child can; the boundary here is that the exit code and the verdict are
decided where the program never ran.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROTOCOL: Final = 1
# The child's entry point; `-P` keeps the working directory off sys.path, as for gpuforge itself.
CHILD_MAIN = "from gpuforge.policycheck.child import main; main()"
_POLL_S = 0.2  # how often the parent looks whether the child is gone while the pipe is quiet


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CatalogedAmiWire(_Strict):
    """One catalogued AMI as the child's mocks need it (`mocks.CataloguedAmi`)."""

    entry: dict[str, Any]
    name: str | None


class ChildRequest(_Strict):
    """Everything the child needs to run the program: the loaded project and the mocks' inputs."""

    protocol: Literal[1] = PROTOCOL
    nonce: str
    directory: str
    name: str
    program: str
    stack: str
    config_file: str | None
    config: dict[str, str]
    secrets: list[str]
    region: str
    catalogued: list[CatalogedAmiWire]
    answers_path: str | None
    invokes: dict[str, dict[str, Any]]


class ResourceWire(_Strict):
    """`pulumi_mocks.RecordedResource`, field for field."""

    type: str
    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    id: str
    urn: str
    parent_urn: str | None
    custom: bool
    dependencies: list[str]
    ignore_changes: list[str]
    property_dependencies: dict[str, list[str]]


class LookupWire(_Strict):
    """`mocks.AmiLookup`, field for field."""

    args: dict[str, Any]
    ami_id: str
    pinned: bool
    reason: str


class ErrorWire(_Strict):
    """The GpuforgeError that stopped the run; 0 and 1 are the parent's to give, never the child's."""

    message: str
    exit_code: int = Field(ge=2, le=125)


class ChildRecord(_Strict):
    """What the child sends back: the run's record, or the error that stopped it."""

    protocol: Literal[1] = PROTOCOL
    nonce: str
    resources: list[ResourceWire] = []
    lookups: list[LookupWire] = []
    outputs: dict[str, Any] = {}
    error: ErrorWire | None = None


class ChildFailed(Exception):
    """The child did not complete the protocol; `how` says what happened instead, for the user."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def run_child(request: ChildRequest, cwd: str) -> ChildRecord:
    """Run the child on `request` and return its record; ChildFailed says why there is none."""
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-P", "-c", CHILD_MAIN, str(write_end)],
            stdin=subprocess.PIPE,
            pass_fds=(write_end,),
            cwd=cwd,
        )
    finally:
        os.close(write_end)
    try:
        assert child.stdin is not None  # stdin=PIPE
        try:
            child.stdin.write(request.model_dump_json().encode())
            child.stdin.close()
        except BrokenPipeError:
            pass  # the child is already gone; its status tells why
        data = _read_until_done(read_end, child)
    finally:
        os.close(read_end)
        status = child.wait()
    return _accept(data, status, request.nonce)


def _read_until_done(read_end: int, child: subprocess.Popen[bytes]) -> bytes:
    """Everything the child wrote, up to end of file or, if a process it started holds the pipe
    open after the child is gone, up to the child's end."""
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ)
        while True:
            if selector.select(timeout=_POLL_S):
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            elif child.poll() is not None:
                break  # the pipe is quiet and the child has ended: nothing more can come from it
    return b"".join(chunks)


def _accept(data: bytes, status: int, nonce: str) -> ChildRecord:
    if not data:
        raise ChildFailed(f"{_status(status)} before it sent gpuforge a result")
    try:
        record = ChildRecord.model_validate_json(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise ChildFailed(
            f"the result it sent is not one gpuforge's run writes ({where}: {first['msg']}; {_status(status)})"
        ) from None
    if record.nonce != nonce:
        raise ChildFailed(
            f"the result it sent is not one gpuforge's run writes (another run's nonce; {_status(status)})"
        )
    if status != 0:
        raise ChildFailed(f"{_status(status)} after it sent its result")
    return record


def _status(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"its process was killed by {name}"
    return f"its process exited with status {status}"
