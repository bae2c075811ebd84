"""Entry point the Pulumi engine runs for `--policy-pack policies/`: starts the analyzer and blocks."""

from pulumi_policy import PolicyPack

from gpuforge.policies.pack import PACK_DESCRIPTION, PACK_ENFORCEMENT_LEVEL, PACK_NAME, POLICIES

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=PACK_ENFORCEMENT_LEVEL,
    description=PACK_DESCRIPTION,
)
