"""The mocked run itself: a real program file under the SDK's mocks, run many times in one process."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pulumi
import pytest
from plan_support import STACK_DIR

from gpuforge.errors import InputError
from gpuforge.plan.run import run_program
from gpuforge.stack_config import load_stack_config

PROGRAM = """
import pulumi
import pulumi_aws as aws

from gpuforge.errors import InputError

config = pulumi.Config("gpuforge")
count = config.require_int("nodeCount")
if count > 100:
    try:
        raise InputError("gpuforge:nodeCount is too large for this test program. Fix: use 100 or fewer.")
    except InputError as error:
        raise pulumi.RunError(error.message) from error
if count < 0:
    raise pulumi.RunError("a plain RunError")
group = aws.ec2.PlacementGroup("group", strategy="cluster")
for index in range(count):
    aws.ec2.Eip(f"eip-{index}", domain="vpc", opts=pulumi.ResourceOptions(parent=group))
pulumi.export("group", group.name)
pulumi.export("count", count)
pulumi.export("stack", pulumi.get_stack())
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "__main__.py"
    path.write_text(textwrap.dedent(PROGRAM), encoding="utf-8")
    return path


def test_outputs_resolve_and_every_resource_is_recorded_with_its_parent(program: Path) -> None:
    run = run_program(program, project="p", stack="s", config={"gpuforge:nodeCount": "3"}, region="us-west-2")
    assert run.outputs["count"] == 3
    assert run.outputs["stack"] == "s"
    group = run.mocks.named("group")
    assert run.outputs["group"] == group.outputs["name"]
    assert group.parent_urn == "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s"
    eips = run.mocks.of_type("aws:ec2/eip:Eip")
    assert sorted(eip.name for eip in eips) == ["eip-0", "eip-1", "eip-2"]
    assert {eip.parent_urn for eip in eips} == {group.urn}
    assert all(eip.inputs["domain"] == "vpc" for eip in eips)


def test_runs_do_not_leak_into_each_other(program: Path) -> None:
    first = run_program(
        program, project="p", stack="a", config={"gpuforge:nodeCount": "5"}, region="us-west-2"
    )
    second = run_program(
        program, project="q", stack="b", config={"gpuforge:nodeCount": "1"}, region="us-west-2"
    )
    again = run_program(
        program, project="p", stack="a", config={"gpuforge:nodeCount": "5"}, region="us-west-2"
    )
    assert len(first.resources) == 6
    assert len(second.resources) == 2
    assert second.outputs["stack"] == "b"
    assert all(
        resource.urn is not None and resource.urn.startswith("urn:pulumi:b::q::")
        for resource in second.resources
    )
    # Same program, same config: the same resources with the same ids.
    assert sorted((r.urn, r.id) for r in first.resources) == sorted((r.urn, r.id) for r in again.resources)


def test_a_run_error_from_gpuforge_input_comes_back_as_that_error(program: Path) -> None:
    with pytest.raises(InputError, match="nodeCount is too large"):
        run_program(program, project="p", stack="s", config={"gpuforge:nodeCount": "101"}, region="us-west-2")
    # The runtime is usable again after a failed run.
    run = run_program(program, project="p", stack="s", config={"gpuforge:nodeCount": "1"}, region="us-west-2")
    assert run.outputs["count"] == 1


def test_other_run_errors_pass_through(program: Path) -> None:
    with pytest.raises(pulumi.RunError, match="a plain RunError"):
        run_program(program, project="p", stack="s", config={"gpuforge:nodeCount": "-1"}, region="us-west-2")


@pytest.mark.parametrize(
    "call", ["import sys; sys.exit(0)", "import sys; sys.exit(3)", "import os; os._exit(0)"]
)
def test_a_program_that_exits_instead_of_returning_is_bad_input_not_a_pass(tmp_path: Path, call: str) -> None:
    # An exit with code 0 would otherwise end gpuforge with success and no verdict: a false pass in CI.
    program = tmp_path / "__main__.py"
    program.write_text(f"import pulumi\n{call}\n", encoding="utf-8")
    name = call.split("; ")[1].split("(")[0]
    with pytest.raises(InputError, match=rf"{program}: the program called {name}\("):
        run_program(program, project="p", stack="s", config={}, region="us-west-2")
    assert os._exit.__name__ == "_exit"  # restored for the rest of the process


def test_the_stack_program_itself_refuses_an_unknown_key_from_the_engine(catalog_path: Path) -> None:
    """Under `pulumi up` no file loader runs first: the program checks the config the engine hands it."""
    values = {**load_stack_config(STACK_DIR, "p5-prod").engine_values, "gpuforge:catalog": str(catalog_path)}
    run = run_program(
        STACK_DIR / "__main__.py",
        project="gpuforge-training",
        stack="p5-prod",
        config=values,
        region="us-east-1",
    )
    assert run.outputs["summary"]["nodes"] == 16

    values["gpuforge:nodeCont"] = "4"
    with pytest.raises(
        InputError, match=r"config of stack p5-prod \(Pulumi.p5-prod.yaml\): unknown key 'gpuforge:nodeCont'"
    ):
        run_program(
            STACK_DIR / "__main__.py",
            project="gpuforge-training",
            stack="p5-prod",
            config=values,
            region="us-east-1",
        )
