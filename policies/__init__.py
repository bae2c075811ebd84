"""gpuforge's CrossGuard policy pack: rules that reject unpinned and unsafe GPU stacks.

The rules live in importable modules (`rules_*`), `pack` lists them with the pack's
metadata, and `__main__.py` only hands that list to `PolicyPack(...)`, which starts
the analyzer server the Pulumi engine talks to. `runner.run_policies` runs the same
rules offline on the resources a mocked program registered (`gpuforge plan`).
"""
