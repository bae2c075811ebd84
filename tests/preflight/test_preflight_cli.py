"""`gpuforge preflight` through the real command line: exit codes and messages, no tracebacks.

The last test runs the whole command against moto's server on 127.0.0.1, reached
only through AWS_ENDPOINT_URL, which boto3 itself honours; moto does not implement
DescribeCapacityReservations or EC2's Service Quotas, so there the quota and
capacity checks fail with what the emulator answers, and the command exits 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from preflight_cases import REGION, block_capacity, stack_config, write_stack

from gpuforge.cli import main

PREFLIGHT_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ENDPOINT_URL",
)


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment where boto3's credential chain finds nothing (and never asks IMDS)."""
    for name in PREFLIGHT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _stack(tmp_path: Path) -> Path:
    return write_stack(tmp_path / "stack", stack_config())


@pytest.mark.usefixtures("no_credentials")
def test_no_credentials_exits_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["preflight", str(_stack(tmp_path)), "--stack", "test"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith("gpuforge: error: no AWS credentials found.")
    assert "AWS_PROFILE" in captured.err and "Traceback" not in captured.err


@pytest.mark.usefixtures("no_credentials")
def test_unknown_profile_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "gpuforge-no-such-profile")
    code = main(["preflight", str(_stack(tmp_path)), "--stack", "test"])
    err = capsys.readouterr().err
    assert code == 2
    assert "gpuforge-no-such-profile" in err and "Fix: set AWS_PROFILE" in err


def test_bad_config_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_dir = write_stack(tmp_path / "stack", stack_config(**{"gpuforge:nodeCount": 0}))
    code = main(["preflight", str(stack_dir), "--stack", "test", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert json.loads(captured.out)["error"]["exit_code"] == 2  # --json: the error as an object too
    assert "Pulumi.test.yaml" in captured.err and "gpuforge:nodeCount" in captured.err


def test_unknown_stack_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["preflight", str(_stack(tmp_path)), "--stack", "prod"])
    assert code == 2
    assert "Pulumi.prod.yaml: no such stack file" in capsys.readouterr().err


def test_missing_catalog_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    code = main(["preflight", str(_stack(tmp_path)), "--stack", "test", "--catalog", str(missing)])
    assert code == 2
    assert f"{missing}: no such AMI catalog (given by --catalog)" in capsys.readouterr().err


def test_command_reaches_aws_through_aws_endpoint_url(
    tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # moto's unimplemented calls need no retries here
    empty = tmp_path / "catalog.json"
    empty.write_text('{"schema": 1, "images": {}}\n', encoding="utf-8")
    stack_dir = write_stack(tmp_path / "stack", stack_config(**{"gpuforge:capacity": block_capacity()}))
    code = main(["preflight", str(stack_dir), "--stack", "test", "--catalog", str(empty), "--json"])
    document = json.loads(capsys.readouterr().out)
    statuses = {item["id"]: item["status"] for item in document["checks"]}
    assert code == 1
    # Answered by moto over HTTP: the offering and the instance type.
    assert statuses["offering"] == statuses["instance-type"] == "ok"
    assert f"offered in {REGION}a" in next(i["message"] for i in document["checks"] if i["id"] == "offering")
    # moto answers GetServiceQuota for EC2 with NoSuchResourceException, so preflight falls back to
    # GetAWSDefaultServiceQuota, which moto does not implement: a failed check, not a traceback.
    quota = next(item["message"] for item in document["checks"] if item["id"] == "quota")
    assert statuses["quota"] == "fail"
    assert quota.startswith("GetAWSDefaultServiceQuota failed: 500")
    # moto has no DescribeCapacityReservations: its HTML error page is a failed check, not a traceback.
    capacity = next(item["message"] for item in document["checks"] if item["id"] == "capacity")
    assert statuses["capacity"] == "fail"
    assert capacity.startswith("the endpoint's answer is not an AWS API response")
    assert statuses["ami"] == "fail"  # the empty catalog has no image for the matrix


@pytest.mark.parametrize("command", ["preflight", "plan"])
@pytest.mark.parametrize("key", ["start", "end"])
@pytest.mark.parametrize("bare", [1767225600, "1767225600", 1767225600000, 1.7672256e9])
def test_a_bare_number_as_a_capacity_block_time_is_refused_as_ambiguous(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, bare: object, command: str
) -> None:
    """Pydantic alone would take 1767225600 as Unix seconds, UTC; a person may have meant another unit."""
    config = stack_config(**{"gpuforge:capacity": block_capacity(**{key: bare}), "gpuforge:nodeMode": "asg"})
    code = main([command, str(write_stack(tmp_path / "stack", config)), "--stack", "test"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"gpuforge:capacity.{key} = " in err
    assert "a bare number is ambiguous" in err and "ISO 8601" in err and "Fix:" in err
    assert "Traceback" not in err
