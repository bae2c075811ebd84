"""The pytest plugin, run as a team would run it: a fresh pytest in a folder of their own (pytester).

The inner runs are subprocesses, so the `gpuforge_plan` fixture can only come from the
installed `pytest11` entry point: the folder has no conftest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from policycheck_support import FIXTURES, PINNED_AMI, RENDER_FARM, REPO

pytest_plugins = ["pytester"]

EXAMPLE = FIXTURES / "policy_example.py"


@pytest.fixture
def team_folder(pytester: pytest.Pytester, catalog_file: Path) -> pytest.Pytester:
    """A folder holding the render-farm project and the catalog that records its pinned AMI."""
    shutil.copytree(RENDER_FARM, pytester.path / "render-farm")
    shutil.copy(catalog_file, pytester.path / "catalog.json")
    return pytester


def test_the_readme_example_passes(team_folder: pytest.Pytester) -> None:
    team_folder.makepyfile(test_render_farm=EXAMPLE.read_text(encoding="utf-8"))
    result = team_folder.runpytest_subprocess("-q")
    result.assert_outcomes(passed=2)


def test_the_readme_shows_the_example_as_it_is_tested() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8") in readme


def test_failed_assertions_say_what_was_found(team_folder: pytest.Pytester) -> None:
    team_folder.makepyfile(
        test_wrong="""
        def test_unpinned_has_no_mandatory_violations(gpuforge_plan):
            gpuforge_plan("render-farm", stack="unpinned", catalog="catalog.json").assert_no_mandatory_violations()

        def test_pinned_violates_ami_pinned(gpuforge_plan):
            gpuforge_plan("render-farm", stack="pinned", catalog="catalog.json").assert_violates("ami-pinned")

        def test_unpinned_violates_on_another_resource(gpuforge_plan):
            farm = gpuforge_plan("render-farm", stack="unpinned", catalog="catalog.json")
            farm.assert_violates("ami-pinned", resource="render-pinned")
        """
    )
    result = team_folder.runpytest_subprocess("-q")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: 1 mandatory policy violation(s):",
            "*mandatory ami-pinned on aws:ec2/instance:Instance render-unpinned: AMI 'ami-unpinned-*",
            "*AssertionError: expected policy 'ami-pinned' to report a violation; the verdicts were:",
            "*advisory cost-allocation-tags on aws:ec2/instance:Instance render-pinned:*",
            "*expected policy 'ami-pinned' to report a violation on resource 'render-pinned'*",
        ]
    )


def test_config_on_top_of_the_stack_file_and_the_resources(team_folder: pytest.Pytester) -> None:
    team_folder.makepyfile(
        test_config=f"""
        def test_a_pinned_id_given_as_config_passes(gpuforge_plan):
            farm = gpuforge_plan(
                "render-farm",
                stack="unpinned",
                config={{"amiId": "{PINNED_AMI}", "instanceType": "g5.xlarge"}},
                catalog="catalog.json",
            )
            farm.assert_no_mandatory_violations()
            (node,) = [r for r in farm.resources if r.type == "aws:ec2/instance:Instance"]
            assert node.inputs["ami"] == "{PINNED_AMI}"
            assert node.inputs["instanceType"] == "g5.xlarge"

        def test_removing_a_key_the_program_needs_is_bad_input(gpuforge_plan):
            import pytest
            from gpuforge.errors import InputError

            with pytest.raises(InputError, match="requires config key render-farm:amiName"):
                gpuforge_plan("render-farm", stack="unpinned", config={{"amiName": None}})
        """
    )
    team_folder.runpytest_subprocess("-q").assert_outcomes(passed=2)


def test_the_plugin_is_registered_and_imports_nothing_heavy() -> None:
    (plugin,) = [point for point in entry_points(group="pytest11") if point.name == "gpuforge"]
    assert plugin.value == "gpuforge.pytest_plugin"
    heavy = ("pulumi", "pulumi_aws", "pulumi_policy", "gpuforge.policycheck", "gpuforge.plan")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; import gpuforge.pytest_plugin; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    loaded = json.loads(done.stdout)
    assert not [name for name in loaded if name.startswith(heavy)]
