"""One `gpuforge plan`: the stack's config, its program's mocked run, and the policy pack's verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError
from gpuforge.images.catalog import DEFAULT_CATALOG
from gpuforge.plan.run import PROGRAM, ProgramRun, load, run_stack
from gpuforge.policies.pack import POLICIES
from gpuforge.policies.pinned_images import CATALOG_KEY
from gpuforge.policies.rules_ami import AMI_PINNED, REGION_KEY
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.stack_config import StackConfig


@dataclass(frozen=True)
class Plan:
    """One `gpuforge plan`: the config, the mocked run, and the policy pack's verdicts."""

    config: StackConfig
    run: ProgramRun
    verdicts: tuple[Verdict, ...]

    @property
    def summary(self) -> Mapping[str, Any]:
        summary: Mapping[str, Any] = self.run.outputs["summary"]
        return summary

    @property
    def slurm_config(self) -> Mapping[str, str]:
        """The rendered Slurm files by name, as the program exported them ({} without Slurm)."""
        files: Mapping[str, str] = self.run.outputs.get("slurm_config") or {}
        return files

    @property
    def mandatory_failures(self) -> tuple[Verdict, ...]:
        return tuple(verdict for verdict in self.verdicts if verdict.enforcement == "mandatory")


def plan(stack_dir: Path, stack: str, *, catalog: Path | None = None, isolated: bool = False) -> Plan:
    """Validate the stack's config, run its program under the mocks, and check the result with the policy pack.

    `isolated` runs the program in a child process, as `gpuforge policy check` does, so that it
    cannot end or rig the command (the CLI's choice; `gpuforge.policycheck.channel` says why).
    """
    config = load(stack_dir, stack, catalog)
    if isolated:
        from gpuforge.policycheck.check import run_stack_isolated  # imports this module

        run = run_stack_isolated(config)
    else:
        run = run_stack(config)
    if not isinstance(run.outputs.get("summary"), Mapping):
        raise InputError(
            f"{config.stack_dir / PROGRAM}: the program exported no `summary` mapping, so there is no "
            "cluster to show. Fix: plan a gpuforge stack, whose program exports GpuCluster.summary "
            '(`pulumi.export("summary", cluster.summary)`), such as stacks/training.'
        )
    verdicts = run_policies(
        run.resources, policy_config(config.catalog_path or DEFAULT_CATALOG, config.region)
    )
    return Plan(config=config, run=run, verdicts=tuple(verdicts))


def policy_config(catalog: Path, region: str | None) -> dict[str, Any]:
    """The policy pack's config for this plan: the AMI rules read the catalog the program resolved from,
    and ami-pinned the region the program deploys to (an AMI catalogued for another region is refused).

    Under `pulumi preview` the same is `--policy-pack-config` with `catalogPath` for these policies,
    and ami-pinned reads the region from each resource's provider.
    """
    config: dict[str, Any] = {
        policy.name: {CATALOG_KEY: str(catalog)}
        for policy in POLICIES
        if policy.config_schema is not None and CATALOG_KEY in policy.config_schema.properties
    }
    if region is not None:
        config[AMI_PINNED.name] = {**config.get(AMI_PINNED.name, {}), REGION_KEY: region}
    return config
