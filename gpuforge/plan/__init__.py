"""`gpuforge plan`: run a stack's own Pulumi program offline and show what it would create.

The program is the stack's real `__main__.py`, run with the stack's config under the
Pulumi SDK's mocks (`gpuforge.pulumi_mocks`), so no AWS account, Pulumi CLI or
provider plugin is needed. `run` holds the mocked run, `stack_plan` a whole plan
(config, run, policy verdicts), `render` the text and JSON views, `cli` the command.
"""
