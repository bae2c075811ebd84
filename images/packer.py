"""Run the real `packer` binary: find it and its version, stream its output, stop it cleanly.

Packer runs in its own process group. A terminal's Ctrl-C therefore reaches
only gpuforge, which forwards SIGINT to that group and waits (bounded) while
packer terminates its builder instance and deletes its temporary key pair and
security group; only if packer outlives the grace period is the group killed.
A timeout and SIGTERM (a cancelled CI job) take the same path; SIGTERM ends
with exit 143, Ctrl-C with 130. Whatever happens, nothing of the
group is left running when `run` returns.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from packaging.version import InvalidVersion, Version

from gpuforge.errors import GpuforgeError
from gpuforge.images.machine_readable import Event, error_line, parse_line
from gpuforge.images.progress import Progress
from gpuforge.images.signals import SIGINT_EXIT, SIGTERM_EXIT, Terminated, sigterm_as_interrupt

# `packer init` and `required_plugins` arrived in 1.7.0 (Packer 1.7.0 changelog,
# https://github.com/hashicorp/packer/blob/main/CHANGELOG.md). Debian ships 1.6.6.
INIT_SINCE = Version("1.7.0")
# gpuforge renders `imds_support` and `metadata_options` for 1.11+ (plugins installed by
# `packer init`); 1.6.6's bundled amazon builder rejects both.
IMDS_SINCE = Version("1.11.0")
# Packer's cleanup after an interrupt terminates the builder and waits for it: allow minutes.
DEFAULT_GRACE_S = 300.0
_VERSION = re.compile(r"Packer v(\d+\.\d+\.\d+)")


class PackerNotFound(GpuforgeError):
    """No usable packer binary (exit 2)."""


class PackerFailed(GpuforgeError):
    """Packer ran and failed (exit 1); the message quotes packer's own error line."""

    exit_code = 1


class PackerStopped(GpuforgeError):
    """Packer was stopped by a timeout (exit 1), Ctrl-C (exit 130) or SIGTERM (exit 143) and cleaned up."""

    exit_code = 1


@dataclass(frozen=True)
class Packer:
    binary: str
    version: Version

    @property
    def has_init(self) -> bool:
        return self.version >= INIT_SINCE

    @property
    def supports_imds(self) -> bool:
        return self.version >= IMDS_SINCE


def find_packer(name: str = "packer") -> Packer:
    """The packer on PATH (or at `name`) and its version, from `packer version`."""
    binary = shutil.which(name)
    if binary is None:
        raise PackerNotFound(
            f"packer not found: {name!r} is not an executable on PATH. Fix: install packer "
            "(Debian/Ubuntu: `apt-get install packer`, 1.6.6; or HashiCorp's 1.11+ release) and retry."
        )
    try:
        done = subprocess.run(
            [binary, "version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            env={**os.environ, "CHECKPOINT_DISABLE": "1"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PackerNotFound(
            f"{binary}: cannot run `packer version` ({error}). Fix: reinstall packer."
        ) from None
    match = _VERSION.search(done.stdout)
    try:
        version = Version(match.group(1)) if match else None
    except InvalidVersion:
        version = None
    if done.returncode != 0 or version is None:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise PackerNotFound(
            f"{binary}: `packer version` did not report a version (exit {done.returncode}: "
            f"{said[0] if said else 'no output'!r}). Fix: install a working packer."
        )
    return Packer(binary, version)


@dataclass
class PackerRun:
    """What one packer command printed and how it ended."""

    command: tuple[str, ...]
    returncode: int = 0
    events: list[Event] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def error(self) -> str:
        """Packer's own error line, else its last words."""
        found = error_line(self.events)
        if found:
            return found
        plain = [line.strip() for line in self.lines if line.strip()]
        errors = [line for line in plain if line.startswith(("Error", "*"))]
        return " ".join(errors) if errors else (plain[-1] if plain else "packer printed nothing")

    def require_success(self, what: str) -> None:
        if self.returncode != 0:
            raise PackerFailed(f"packer {what} failed (exit {self.returncode}): {self.error()}")


class _Deadline(Exception):
    pass


def _pump(stream: IO[str], sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


class _Session:
    """One packer process group: its output queue, what it said, and how to stop it."""

    def __init__(
        self,
        process: subprocess.Popen[str],
        record: PackerRun,
        progress: Progress | None,
        observer: Callable[[Event], None] | None,
    ) -> None:
        self.process = process
        self.record = record
        self.progress = progress
        self.observer = observer
        self.output: queue.Queue[str | None] = queue.Queue()
        self.eof = False
        self.artifacts_shown: set[str] = set()
        assert process.stdout is not None
        self.reader = threading.Thread(target=_pump, args=(process.stdout, self.output), daemon=True)
        self.reader.start()

    def _take(self, line: str) -> None:
        event = parse_line(line)
        if event is None:
            self.record.lines.append(line.rstrip("\n"))
            if self.progress:
                self.progress.step(line)
            return
        self.record.events.append(event)
        shown = event.type == "ui" and len(event.data) >= 2 and not self._repeated_artifact(event.data[1])
        if self.progress and shown:
            if event.data[0] == "error":
                self.progress.error(event.data[1])
            else:
                self.progress.step(event.data[1])
        if self.observer:
            self.observer(event)

    def _repeated_artifact(self, text: str) -> bool:
        """True for an artifact summary ("--> source: AMIs were created: ...") already shown.

        The manifest post-processor hands the builder's artifact on, so packer lists it twice.
        """
        if not text.startswith("--> "):
            return False
        if text in self.artifacts_shown:
            return True
        self.artifacts_shown.add(text)
        return False

    def pump(self, wait_s: float) -> None:
        """Handle the next output line, waiting up to `wait_s` for one."""
        try:
            item = self.output.get(timeout=max(wait_s, 0.01))
        except queue.Empty:
            return
        if item is None:
            self.eof = True
        else:
            self._take(item)

    def follow(self, deadline: float) -> None:
        """Show output until packer has exited and said everything, or raise _Deadline."""
        settle_until: float | None = None
        while not self.eof:
            now = time.monotonic()
            if now >= deadline:
                raise _Deadline()
            self.pump(min(0.25, deadline - now))
            if self.process.poll() is not None:
                # Packer is gone; a lingering plugin may still hold the pipe open.
                settle_until = settle_until or time.monotonic() + 2.0
                if time.monotonic() > settle_until:
                    break
        remaining = deadline - time.monotonic()
        try:
            self.process.wait(timeout=max(remaining, 0.01))
        except subprocess.TimeoutExpired:
            raise _Deadline() from None

    def stop(self, grace_s: float) -> None:
        """SIGINT to the group, then wait (showing packer's cleanup) up to `grace_s`, then SIGKILL."""
        try:
            os.killpg(self.process.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        try:
            while self.process.poll() is None and time.monotonic() < deadline:
                self.pump(0.25)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (Terminated) again
            pass  # asked twice: stop waiting for the cleanup
        if self.process.poll() is None:
            self._kill_group()
            self.process.wait()
        while not self.eof and not self.output.empty():
            self.pump(0.0)

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Make sure no process of the group is left: packer itself and any plugin it started."""
        if self.process.poll() is None:
            self._kill_group()
            self.process.wait()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                break
            self._kill_group()
            time.sleep(0.05)
        self.reader.join(timeout=5.0)
        self.record.returncode = self.process.returncode


def _follow_or_stop(
    session: _Session, what: str, timeout_s: float, grace_s: float, progress: Progress | None
) -> None:
    """Follow packer to its end; on a timeout, Ctrl-C or SIGTERM, stop it cleanly and raise PackerStopped."""
    try:
        session.follow(time.monotonic() + timeout_s)
    except _Deadline:
        if progress:
            progress.error(f"gpuforge: packer {what} ran past {timeout_s:g} s; interrupting it")
        session.stop(grace_s)
        raise PackerStopped(
            f"packer {what} did not finish within {timeout_s:g} s and was interrupted; it cleaned up its "
            f"builder (last output: {session.record.error()}). Fix: raise --timeout, or look at the step it was on."
        ) from None
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        cause = "terminated (SIGTERM)" if terminated else "interrupted"
        if progress:
            progress.error(f"gpuforge: {cause}; waiting for packer to clean up its builder")
        session.stop(grace_s)
        raise PackerStopped(
            f"{cause}: packer was stopped and cleaned up its builder; no AMI was recorded.",
            exit_code=SIGTERM_EXIT if terminated else SIGINT_EXIT,
        ) from None


def run(
    packer: Packer,
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    progress: Progress | None = None,
    observer: Callable[[Event], None] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
) -> PackerRun:
    """Run `packer ARGS` in `cwd` and return what it did; raise PackerStopped on timeout or interrupt."""
    command = (packer.binary, *args)
    record = PackerRun(command)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env={**env, "CHECKPOINT_DISABLE": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    session = _Session(process, record, progress, observer)
    try:
        with sigterm_as_interrupt():
            _follow_or_stop(session, args[0], timeout_s, grace_s, progress)
    finally:
        session.reap()
        if progress:
            progress.done()
    return record
