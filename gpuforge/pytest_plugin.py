"""pytest plugin: plan a Pulumi program in a test and assert on the policy pack's verdicts.

Installed with gpuforge through the `pytest11` entry point, so any test can ask for
the `gpuforge_plan` fixture:

```python
def test_unpinned_ami_is_rejected(gpuforge_plan):
    gpuforge_plan("infra", stack="dev").assert_violates("ami-pinned")
```

`gpuforge_plan(directory, *, stack=None, config=None, config_file=None, catalog=None,
mock_answers=None)` is `gpuforge policy check` (gpuforge.policycheck.check.check): the
program runs under the Pulumi SDK's mocks with the stack's config, `config` set on
top (`{"instanceType": "p5.48xlarge"}`; a key without a namespace is the project's,
None removes a key), and the pack runs on what it registered. Relative paths are
taken from the folder of the test file. Bad input (a program that raises, a missing
config key, a lookup with no answer) raises gpuforge's InputError with the fix.

pytest loads this module in every run wherever gpuforge is installed, so it imports
nothing heavy: the Pulumi SDK and the pack load when a test first calls the fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gpuforge.policies.runner import Verdict
    from gpuforge.policycheck.check import PolicyCheck
    from gpuforge.pulumi_mocks import RecordedResource


class PlannedProgram:
    """A checked program: its resources and verdicts, and assertions that say what was found instead."""

    def __init__(self, result: PolicyCheck) -> None:
        self.result = result

    @property
    def resources(self) -> tuple[RecordedResource, ...]:
        return self.result.resources

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return self.result.verdicts

    def violations(self, policy: str, *, resource: str | None = None) -> list[Verdict]:
        """The verdicts of `policy`, on the resource named `resource` when given."""
        urns = {r.urn for r in self.resources if r.name == resource} if resource is not None else None
        return [v for v in self.verdicts if v.policy == policy and (urns is None or v.urn in urns)]

    def assert_violates(self, policy: str, *, resource: str | None = None) -> list[Verdict]:
        """Fail unless `policy` reported a violation (on `resource`, if given); return its verdicts."""
        found = self.violations(policy, resource=resource)
        if not found:
            on = f" on resource {resource!r}" if resource is not None else ""
            raise AssertionError(
                f"expected policy {policy!r} to report a violation{on}; the verdicts were:\n{self._listing(self.verdicts)}"
            )
        return found

    def assert_no_mandatory_violations(self) -> None:
        """Fail, listing them, if any mandatory policy reported a violation."""
        failures = self.result.mandatory_failures
        if failures:
            raise AssertionError(f"{len(failures)} mandatory policy violation(s):\n{self._listing(failures)}")

    def _listing(self, verdicts: Sequence[Verdict]) -> str:
        names = {r.urn: f"{r.type} {r.name}" for r in self.resources}
        lines = [
            f"  {v.enforcement} {v.policy} on {names.get(v.urn, v.urn or 'stack')}: {v.message}"
            for v in verdicts
        ]
        return "\n".join(lines) or "  (none)"


PlanProgram = Callable[..., PlannedProgram]


@pytest.fixture
def gpuforge_plan(request: pytest.FixtureRequest) -> PlanProgram:
    """`gpuforge_plan(directory, *, stack, config, config_file, catalog, mock_answers)`; see the module docstring."""
    base = request.path.parent

    def plan(
        directory: str | Path,
        *,
        stack: str | None = None,
        config: Mapping[str, Any] | None = None,
        config_file: str | Path | None = None,
        catalog: str | Path | None = None,
        mock_answers: str | Path | None = None,
    ) -> PlannedProgram:
        from gpuforge.policycheck.check import check

        def at(path: str | Path | None) -> Path | None:
            return None if path is None else base / path

        return PlannedProgram(
            check(
                base / directory,
                stack=stack,
                config=config,
                config_file=at(config_file),
                catalog=at(catalog),
                mock_answers=at(mock_answers),
            )
        )

    return plan
