"""A broken AWS configuration is exit 2 with its fix, from every command, never a traceback (gpuforge.aws_session).

Each case is a mistake people make with their real ~/.aws files and AWS_* variables, written into files of the
test's own and read by the real botocore: a profile that does not exist (ProfileNotFound, the most common of
all), a config file that does not parse, half a key pair, a credential_process that is not installed, an SSO
profile never signed in, a profile that sources itself, a retry mode or endpoint URL that is none, a web
identity token file that is a pipe. None needs AWS: each is refused before the first request leaves.

Some run in a fresh process: botocore's endpoint data was read through a session that honoured AWS_PROFILE,
and the first command in a process to read it (a region check, during stack loading) raised ProfileNotFound,
so an in-process test passed or failed by the order tests ran in.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.cli import main

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks" / "training"


@pytest.fixture
def aws_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An AWS environment of the test's own: no AWS_* variable from outside, config and credentials files in
    tmp_path (absent until a test writes them), and no instance metadata to ask."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    folder = tmp_path / "aws"
    folder.mkdir()
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return folder


# Keys, and an endpoint where nothing listens: should a case get past the configuration, nothing leaves the machine.
KEYS = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
}
SSO = "sso_start_url = https://example.awsapps.com/start\nsso_region = us-east-1\n"
# (id, environment, ~/.aws/config text, what the message must say)
CASES = [
    ("unknown-profile", {"AWS_PROFILE": "gpuforge-no-such-profile"}, "", "aws configure list-profiles"),
    ("config-not-ini", {}, "[default\nregion = us-east-1\n", "not an AWS config file botocore can read"),
    ("half-a-key-pair", {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE"}, "", "incomplete AWS credentials"),
    (
        "credential-process-missing",
        {"AWS_PROFILE": "p"},
        "[profile p]\ncredential_process = /nonexistent/gpuforge-helper\n",
        "cannot be used",
    ),
    (
        "sso-never-signed-in",
        {"AWS_PROFILE": "p"},
        f"[profile p]\n{SSO}sso_account_id = 123456789012\nsso_role_name = r\n",
        "aws sso login",
    ),
    (
        "sso-session-missing",
        {"AWS_PROFILE": "p"},
        "[profile p]\nsso_session = nope\nsso_account_id = 123456789012\nsso_role_name = r\n",
        "cannot be loaded",
    ),
    (
        "profile-sources-itself",
        {"AWS_PROFILE": "p"},
        "[profile p]\nsource_profile = p\nrole_arn = arn:aws:iam::123456789012:role/r\n",
        "cannot be loaded",
    ),
    ("defaults-mode", {**KEYS, "AWS_DEFAULTS_MODE": "fast"}, "", "invalid AWS configuration"),
    ("endpoint-not-a-url", {**KEYS, "AWS_ENDPOINT_URL": "not a url"}, "", "cannot be used"),
]


@pytest.mark.parametrize(("env", "config", "says"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_preflight_refuses_each_broken_aws_configuration_with_its_fix(
    aws_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    config: str,
    says: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (aws_home / "config").write_text(config, encoding="utf-8")
    code = main(["preflight", str(STACKS), "--stack", "p5-prod"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    assert captured.err.startswith("gpuforge: error: ") and says in captured.err, captured.err
    assert "Fix:" in captured.err and "Traceback" not in captured.err


def _fresh(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`gpuforge ARGS` in a process of its own (nothing read or cached before it), run from `cwd` so that the
    installed package is imported, not the checkout's folder."""
    return subprocess.run(
        [sys.executable, "-m", "gpuforge.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_a_pipe_as_the_web_identity_token_file_is_refused_not_waited_on(
    aws_home: Path, tmp_path: Path
) -> None:
    """botocore opens the token file with a plain open, which a pipe blocks for ever: the bound is the
    subprocess timeout of `_fresh`, not a guess at how long the refusal takes."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    env = {
        **os.environ,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(fifo),
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r",
    }
    done = _fresh(["preflight", str(STACKS), "--stack", "p5-prod"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" in done.stderr and "not a regular file" in done.stderr
    assert "Fix:" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_profile_in_a_fresh_process_is_exit_2_not_a_traceback(
    aws_home: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "AWS_PROFILE": "gpuforge-no-such-profile"}
    done = _fresh(["preflight", str(STACKS), "--stack", "p5-prod"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "gpuforge-no-such-profile" in done.stderr and "aws configure list-profiles" in done.stderr


def test_a_command_that_calls_no_aws_ignores_a_broken_aws_configuration(
    aws_home: Path, tmp_path: Path
) -> None:
    """`scheduler render` of a Slurm stack reads botocore's region list and calls no AWS: neither an unknown
    profile nor a config file that does not parse may stop it."""
    (aws_home / "config").write_text("[default\n", encoding="utf-8")
    env = {**os.environ, "AWS_PROFILE": "gpuforge-no-such-profile"}
    out = tmp_path / "render"
    done = _fresh(
        ["scheduler", "render", str(STACKS), "--stack", "p5-prod", "--out", str(out)], env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (out / "slurm.conf").is_file()


def _makes_sessions(path: Path) -> list[str]:
    """The lines of `path` that make a boto3 or botocore session or client by themselves."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = ast.unparse(node.func.value)
        if owner in {"boto3", "boto3.session", "botocore.session"} and node.func.attr in {
            "client",
            "resource",
            "Session",
            "get_session",
        }:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_aws_session_makes_boto3_sessions_and_clients() -> None:
    """One place reads the AWS configuration, so its errors read the same from every command."""
    modules = [
        path
        for folder in ("gpuforge", "images", "components", "policies")
        for path in sorted((REPO / folder).rglob("*.py"))
    ]
    makers = [line for path in modules for line in _makes_sessions(path)]
    assert makers and all(line.startswith("gpuforge/aws_session.py:") for line in makers), makers
