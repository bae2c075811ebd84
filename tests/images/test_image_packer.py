"""The packer runner with the real binary: version, failures quoted, timeouts and Ctrl-C cleaned up.

The slow builds here are amazon-ebs builds against moto's server with a
`shell-local` provisioner that sleeps, so there is a builder instance for
packer to clean up when it is stopped.
"""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest
from image_helpers import BASE_AMI, FIXTURES, REGION, pids_with
from waiting import WAIT_S

from gpuforge.images import packer
from gpuforge.images.ec2 import Aws
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws
from gpuforge.images.machine_readable import Event, artifact_amis, error_line, parse_line
from gpuforge.images.packer import Packer, PackerFailed, PackerNotFound, PackerStopped, find_packer
from gpuforge.images.progress import Progress

# The slow build's provisioner sleeps this long: every stop below must come before it ends.
PROVISION_S = int(2 * WAIT_S)
# The build's own timeout in the timeout test: it must land after packer launched the builder
# instance (the test asserts it was launched and then terminated). A whole build against moto takes
# under a second on an idle machine (DESIGN.md); 30 s leaves a loaded one thirty times that, and
# ends well before PROVISION_S.
BUILD_TIMEOUT_S = 30


def test_machine_readable_lines_unescape_commas_and_newlines() -> None:
    event = parse_line("1796232208,,ui,say,==> a: Deregistered AMI x%!(PACKER_COMMA) id: ami-1\\nnext\n")
    assert event == Event(1796232208, "", "ui", ("say", "==> a: Deregistered AMI x, id: ami-1\nnext"))
    assert parse_line("panic: runtime error") is None
    assert parse_line("") is None


def test_artifacts_of_a_recorded_build_are_de_duplicated() -> None:
    lines = (FIXTURES / "packer-build-moto.txt").read_text().splitlines()
    events = [event for line in lines if (event := parse_line(line)) is not None]
    ids = [e for e in events if e.type == "artifact" and e.data[1] == "id"]
    assert len(ids) == 2  # the builder's artifact, then the manifest post-processor's copy
    amis = artifact_amis(events)
    assert len(amis) == 1 and amis[0][0] == REGION and amis[0][1].startswith("ami-")


def test_multi_region_artifact_ids_are_split() -> None:
    event = parse_line(
        "1,b,artifact,0,id,us-east-1:ami-0123456789abcdef0%!(PACKER_COMMA)eu-west-1:ami-11111111"
    )
    assert event is not None
    assert artifact_amis([event]) == [("us-east-1", "ami-0123456789abcdef0"), ("eu-west-1", "ami-11111111")]


def test_the_error_line_is_the_builds_own_error() -> None:
    events = [
        parse_line("1,,ui,error,==> amazon-ebs.x: Upload failed: Upload is not implemented"),
        parse_line("1,amazon-ebs.x,error,Upload is not implemented when communicator = 'none'"),
        parse_line("1,,ui,error,\\n==> Some builds didn't complete successfully and had errors:"),
    ]
    assert error_line([e for e in events if e]) == "Upload is not implemented when communicator = 'none'"


def test_find_packer_reports_the_installed_version(packer_tool: Packer) -> None:
    assert packer_tool.version.major == 1
    assert packer_tool.has_init == (packer_tool.version >= packer.INIT_SINCE)


def test_a_missing_packer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PackerNotFound, match=r"packer not found.*apt-get install packer") as caught:
        find_packer()
    assert caught.value.exit_code == 2


def test_packer_failing_raises_with_packers_own_error_line(packer_tool: Packer, tmp_path: Path) -> None:
    (tmp_path / "bad.pkr.hcl").write_text(
        'source "amazon-ebs" "x" {\n  ami_name = "x"\n  region = "us-east-1"\n}\n'
        'build {\n  sources = ["source.amazon-ebs.x"]\n}\n'
    )
    result = packer.run(
        packer_tool,
        ["validate", "-machine-readable", "bad.pkr.hcl"],
        cwd=tmp_path,
        env=os.environ,
        timeout_s=60,
    )
    with pytest.raises(PackerFailed) as caught:
        result.require_success("validate")
    assert caught.value.exit_code == 1
    assert "packer validate failed (exit 1)" in caught.value.message
    assert "ami_name must be between 3 and 128 characters long" in caught.value.message


def _slow_build(directory: Path, endpoint: str, seconds: int) -> str:
    name = f"slow-{directory.name}.pkr.hcl"
    (directory / name).write_text(
        f"""source "amazon-ebs" "slow" {{
  ami_name                   = "gpuforge-{directory.name}"
  communicator               = "none"
  custom_endpoint_ec2        = "{endpoint}"
  instance_type              = "c6i.large"
  region                     = "{REGION}"
  skip_credential_validation = true
  source_ami                 = "{BASE_AMI}"
}}

build {{
  sources = ["source.amazon-ebs.slow"]

  provisioner "shell-local" {{
    inline = ["echo provisioning-started", "sleep {seconds}"]
  }}
}}
"""
    )
    return name


def _group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _instances(aws: Aws) -> list[tuple[str, str]]:
    reservations = aws.client().describe_instances()["Reservations"]
    return [(i["InstanceId"], i["State"]["Name"]) for r in reservations for i in r["Instances"]]


def _stopped_build(
    packer_tool: Packer, moto_server: LocalAws, tmp_path: Path, *, timeout_s: float, interrupt: bool
) -> tuple[PackerStopped, int, list[tuple[str, str]]]:
    """Run the slow build until it is stopped; the error, packer's process group, the instances it made."""
    aws = Aws(REGION, moto_server.endpoint, DUMMY_CREDENTIALS)
    before = {instance for instance, _ in _instances(aws)}
    template = _slow_build(tmp_path, moto_server.endpoint, PROVISION_S)
    groups: set[int] = set()

    def observe(event: Event) -> None:
        for pid in pids_with(template):
            try:
                groups.add(os.getpgid(pid))
            except (
                ProcessLookupError
            ):  # it exited between the listing and this call: its group is seen elsewhere
                continue
        if interrupt and "provisioning-started" in event.text:
            os.kill(os.getpid(), signal.SIGINT)  # what a terminal's Ctrl-C delivers to gpuforge

    started = time.monotonic()
    with pytest.raises(PackerStopped) as caught:
        packer.run(
            packer_tool,
            ["build", "-machine-readable", template],
            cwd=tmp_path,
            env=aws.packer_env(os.environ),
            timeout_s=timeout_s,
            observer=observe,
            grace_s=60,
        )
    assert time.monotonic() - started < PROVISION_S  # bounded: stopped before the provisioner's sleep ends
    assert len(groups) == 1 and os.getpgid(os.getpid()) not in groups  # packer ran in its own group
    after = [(i, state) for i, state in _instances(aws) if i not in before]
    return caught.value, groups.pop(), after


def test_ctrl_c_lets_packer_clean_up_its_builder_and_leaves_no_process(
    packer_tool: Packer, moto_server: LocalAws, tmp_path: Path
) -> None:
    stopped, group, launched = _stopped_build(
        packer_tool, moto_server, tmp_path, timeout_s=PROVISION_S, interrupt=True
    )
    assert stopped.exit_code == 130
    assert "interrupted" in stopped.message
    assert launched, "packer launched a builder instance"
    assert all(state == "terminated" for _, state in launched), launched
    assert _group_is_gone(group), "packer, a plugin or the provisioner's sleep outlived the interrupt"


def test_a_timeout_interrupts_packer_the_same_way(
    packer_tool: Packer, moto_server: LocalAws, tmp_path: Path
) -> None:
    stopped, group, launched = _stopped_build(
        packer_tool, moto_server, tmp_path, timeout_s=BUILD_TIMEOUT_S, interrupt=False
    )
    assert stopped.exit_code == 1
    assert f"did not finish within {BUILD_TIMEOUT_S} s" in stopped.message
    assert launched and all(state == "terminated" for _, state in launched), launched
    assert _group_is_gone(group)


def test_a_process_that_ignores_the_interrupt_is_killed_after_the_grace_period(
    packer_tool: Packer, tmp_path: Path
) -> None:
    """Real packer honours SIGINT, so a script that ignores it stands in for a hung packer."""
    stubborn = tmp_path / "stubborn"
    stubborn.write_text("#!/usr/bin/env bash\ntrap '' INT\necho 1,,ui,say,started\nsleep 121\n")
    stubborn.chmod(0o755)
    groups: set[int] = set()

    def observe(event: Event) -> None:
        groups.update(os.getpgid(pid) for pid in pids_with(str(stubborn)))

    started = time.monotonic()
    with pytest.raises(PackerStopped):
        packer.run(
            Packer(str(stubborn), packer_tool.version),
            ["build"],
            cwd=tmp_path,
            env=os.environ,
            timeout_s=2,
            grace_s=1,
            progress=None,
            observer=observe,
        )
    assert time.monotonic() - started < 15
    assert len(groups) == 1, "the observer saw the stand-in running"
    assert not pids_with(str(stubborn))
    assert _group_is_gone(groups.pop()), "its sleep outlived the kill"


def test_progress_is_one_live_line_on_a_terminal_and_plain_lines_otherwise() -> None:
    plain = io.StringIO()
    shown = Progress(plain, tty=False)
    shown.step("==> a: Launching\n==> a: Waiting")
    shown.error("Build errored: boom")
    shown.done()
    assert plain.getvalue() == "==> a: Launching\n==> a: Waiting\nBuild errored: boom\n"

    terminal = io.StringIO()
    live = Progress(terminal, tty=True)
    live.step("==> a: Launching")
    live.step("==> a: Waiting")
    live.error("Build errored: boom")
    live.done()
    text = terminal.getvalue()
    assert text.count("\r\033[K") == 3  # two status updates in place, then cleared for the error
    assert "[00:00] ==> a: Waiting" in text
    assert text.endswith("\r\033[KBuild errored: boom\n")
