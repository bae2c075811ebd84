"""Bad input to `gpuforge policy check`: each ends in exit 2 with the file, the key or function, and the fix.

Nothing is printed to stdout before the run has finished, so a failed check leaves
no half-written result (with --json, stdout holds only the error object).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuforge.cli import main

VPC_PROGRAM = """
import pulumi_aws as aws

vpc = aws.ec2.get_vpc(default=True)
aws.ec2.SecurityGroup("web", vpc_id=vpc.id)
"""


def _project(
    root: Path, program: str, *, config: str = "  aws:region: us-west-2\n", project_file: str | None = None
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Pulumi.yaml").write_text(project_file or "name: infra\nruntime: python\n", encoding="utf-8")
    (root / "Pulumi.dev.yaml").write_text(f"config:\n{config}", encoding="utf-8")
    (root / "__main__.py").write_text(textwrap.dedent(program), encoding="utf-8")
    return root


def _fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the command expecting exit 2 and nothing on stdout; return the message."""
    code = main(["policy", "check", *args])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert captured.out == ""
    assert captured.err.startswith("gpuforge: error: ")
    return captured.err


def test_an_invoke_with_no_answer_names_the_function_and_the_answers_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "infra", VPC_PROGRAM)
    err = _fails(capsys, str(project))
    assert (
        f"{project / '__main__.py'}: the program calls the provider function 'aws:ec2/getVpc:getVpc' "
        f"(at {project / '__main__.py'}:4)" in err
    )
    assert "(arguments {'default': True})" in err
    assert "pass --mock-answers FILE" in err and "invokes:\n    aws:ec2/getVpc:getVpc:" in err


def test_a_mock_answers_file_supplies_the_result(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    project = _project(tmp_path / "infra", VPC_PROGRAM)
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        "invokes:\n  aws:ec2/getVpc:getVpc:\n    id: vpc-0123456789abcdef0\n    cidrBlock: 10.0.0.0/16\n",
        encoding="utf-8",
    )
    code = main(["policy", "check", str(project), "--mock-answers", str(answers), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    (group,) = document["resources"]
    assert group["inputs"]["vpcId"] == "vpc-0123456789abcdef0"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "invokes:\n  aws:ec2/getAmi:getAmi:\n    id: ami-0123456789abcdef0\n",
            "answered from the image catalog only",
        ),
        ("vpc: {}\n", "expected one key, 'invokes'"),
        ("invokes:\n  getVpc:\n    id: x\n", "'getVpc' is not a function token"),
        ("invokes:\n  aws:ec2/getVpc:getVpc: vpc-1\n", "expected the result as a mapping"),
    ],
)
def test_a_bad_answers_file_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, expected: str
) -> None:
    project = _project(tmp_path / "infra", VPC_PROGRAM)
    answers = tmp_path / "answers.yaml"
    answers.write_text(content, encoding="utf-8")
    err = _fails(capsys, str(project), "--mock-answers", str(answers))
    assert str(answers) in err and expected in err


def test_a_program_that_raises_names_the_file_line_and_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "infra", "import pulumi\n\nsizes = {}\nsize = sizes['large']\n")
    err = _fails(capsys, str(project))
    assert (
        f"{project / '__main__.py'}: the program raised KeyError: 'large' (at {project / '__main__.py'}:4)"
        in err
    )
    assert "Fix: correct the program" in err


def test_a_missing_config_key_names_the_key_the_stack_file_and_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "infra", "import pulumi\n\npulumi.Config().require('instanceType')\n")
    err = _fails(capsys, str(project))
    stack_file = project / "Pulumi.dev.yaml"
    assert f"{stack_file}: the program requires config key infra:instanceType" in err
    assert f"Fix: add `instanceType: VALUE` under `config:` in {stack_file}" in err


def test_a_value_of_the_wrong_type_names_the_key_and_the_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path / "infra",
        "import pulumi\n\npulumi.Config().require_int('nodes')\n",
        config="  nodes: many\n",
    )
    err = _fails(capsys, str(project))
    assert "infra:nodes = 'many': the program reads it as int" in err


def test_a_secret_the_program_needs_says_it_cannot_be_decrypted_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path / "infra",
        "import pulumi\n\npulumi.Config().require_secret('dbPassword')\n",
        config="  dbPassword:\n    secure: AAABAKq0\n",
    )
    err = _fails(capsys, str(project))
    assert "infra:dbPassword" in err and "cannot be decrypted offline" in err and "--config-file" in err


def test_project_config_defaults_reach_the_program_and_the_stack_file_wins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path / "infra",
        """
        import pulumi
        import pulumi_aws as aws

        config = pulumi.Config()
        aws.ec2.Vpc(config.require("network"), cidr_block="10.0.0.0/16", tags={"tier": config.require("tier")})
        """,
        config="  tier: gold\n",
        project_file="name: infra\nruntime: python\nconfig:\n  network:\n    default: main\n  tier: bronze\n",
    )
    code = main(["policy", "check", str(project), "--stack", "dev", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    (vpc,) = document["resources"]
    assert vpc["name"] == "main" and vpc["inputs"]["tags"] == {"tier": "gold"}


@pytest.mark.parametrize(
    ("project_file", "stacks", "args", "expected"),
    [
        (
            "name: web\nruntime: nodejs\n",
            ["dev"],
            [],
            "runtime = 'nodejs': gpuforge policy check runs Python programs only",
        ),
        ("runtime: python\n", ["dev"], [], "name = None: a Pulumi project needs a non-empty string name"),
        ("name: web\nruntime: python\nmain: src/\n", ["dev"], [], "no such Python program (main = 'src/'"),
        (
            "name: web\nruntime: python\n",
            ["dev", "prod"],
            [],
            "stacks dev, prod: which stack to check is not clear",
        ),
        ("name: web\nruntime: python\n", ["dev"], ["--stack", "qa"], "Pulumi.qa.yaml: no such stack file"),
        ("name: web\nruntime: python\n", ["dev"], ["--config-file", "nowhere.yaml"], "no such config file"),
        (
            "name: web\nruntime: python\n",
            ["dev"],
            ["--config-file", "{root}/Pulumi.yaml"],
            "cannot be read from this file name",
        ),
    ],
)
def test_a_bad_project_is_refused_naming_the_file_and_the_fix(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    project_file: str,
    stacks: list[str],
    args: list[str],
    expected: str,
) -> None:
    project = _project(tmp_path / "web", "import pulumi\n", project_file=project_file)
    for stack in stacks:
        (project / f"Pulumi.{stack}.yaml").write_text("config: {}\n", encoding="utf-8")
    err = _fails(capsys, str(project), *(arg.format(root=project) for arg in args))
    assert expected in err and "Fix:" in err


def test_no_pulumi_yaml_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _fails(capsys, str(tmp_path))
    assert f"{tmp_path}: no Pulumi.yaml" in err


def test_json_failure_prints_only_the_error_object(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "infra", VPC_PROGRAM)
    code = main(["policy", "check", str(project), "--json"])
    out = capsys.readouterr().out
    assert code == 2
    error = json.loads(out)["error"]
    assert error["exit_code"] == 2 and "aws:ec2/getVpc:getVpc" in error["message"]


def test_failed_runs_leave_no_traceback_at_exit(tmp_path: Path) -> None:
    """The SDK keeps a failed run's futures to the end of the process; asyncio logs none of them.

    Several failed checks in one process (as in a test session), the unanswered lookup's
    result feeding a resource (so many futures hold the error), then a program that raises.
    """
    invoke = _project(tmp_path / "invoke", VPC_PROGRAM.replace("get_vpc(", "get_vpc_output("))
    raises = _project(tmp_path / "raises", "import pulumi\nraise RuntimeError('no capacity')\n")
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from gpuforge.errors import GpuforgeError
        from gpuforge.policycheck.check import check
        for project in [{str(invoke)!r}] * 3 + [{str(raises)!r}]:
            try:
                check(Path(project))
            except GpuforgeError as error:
                print(error.message.split(":")[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(invoke / "__main__.py")] * 3 + [str(raises / "__main__.py")]
    assert "never retrieved" not in done.stderr and "Traceback" not in done.stderr


def test_the_command_prints_no_traceback(tmp_path: Path) -> None:
    """The command's stderr is its one message."""
    project = _project(tmp_path / "infra", VPC_PROGRAM)
    gpuforge = Path(sys.executable).parent / "gpuforge"
    done = subprocess.run(
        [str(gpuforge), "policy", "check", str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("gpuforge: error: ")
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr


WILDCARD_POLICY_PROGRAM = """
import json
import pulumi_aws as aws

role = aws.iam.Role("nodes", assume_role_policy=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}))
everything = aws.iam.get_policy_document(statements=[{"actions": ["*"], "resources": ["*"]}])
aws.iam.RolePolicy("admin", role=role.id, policy=everything.json)
"""


@pytest.mark.parametrize(
    "token",
    [
        "aws:iam/getPolicyDocument:getPolicyDocument",
        "aws:index/getCallerIdentity:getCallerIdentity",
        "aws:index/getAvailabilityZones:getAvailabilityZones",
        "aws:ec2/getSubnet:getSubnet",
        # A fixed list of objects would stand in for every manifest a yaml.ConfigFile reads.
        "kubernetes:yaml:decode",
    ],
)
def test_an_answer_for_a_function_the_mocks_answer_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, token: str
) -> None:
    """A file answer serves every call whatever its arguments: for getPolicyDocument it hid a `*` on `*`."""
    project = _project(tmp_path / "infra", WILDCARD_POLICY_PROGRAM)
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        f'invokes:\n  {token}:\n    id: \'1\'\n    json: \'{{"Version": "2012-10-17", "Statement": []}}\'\n',
        encoding="utf-8",
    )
    err = _fails(capsys, str(project), "--mock-answers", str(answers))
    assert f"{answers}: invokes.{token}: gpuforge's mocks answer this function themselves" in err
    assert "Fix: remove the entry" in err


def test_the_wildcard_policy_document_is_judged_from_the_programs_own_statements(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "infra", WILDCARD_POLICY_PROGRAM)
    code = main(["policy", "check", str(project), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [v["policy"] for v in document["policies"] if v["enforcement"] == "mandatory"] == [
        "iam-no-wildcard"
    ]


def test_an_output_invoke_with_no_answer_names_the_programs_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The mocks answer on the SDK's worker threads; the line is the one the program called from."""
    project = _project(tmp_path / "infra", VPC_PROGRAM.replace("get_vpc(", "get_vpc_output("))
    err = _fails(capsys, str(project))
    assert f"'aws:ec2/getVpc:getVpc' (at {project / '__main__.py'}:4)" in err


def test_a_value_the_sdk_cannot_send_names_the_line_that_made_the_resource(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The SDK serializes inputs in a task of its own, whose traceback holds no frame of the program."""
    project = _project(
        tmp_path / "infra",
        "import pulumi_aws as aws\n\n\naws.ec2.Instance('x', ami='ami-0123456789abcdef0', instance_type=object())\n",
    )
    err = _fails(capsys, str(project))
    assert "unexpected input of type object for instance_type in Instance" in err
    assert f"(at {project / '__main__.py'}:4)" in err
