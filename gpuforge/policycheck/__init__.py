"""`gpuforge policy check DIR`: any Python Pulumi program under the SDK's mocks, then the policy pack.

`gpuforge plan` checks gpuforge's own stacks; this checks a program a team wrote
itself, with plain pulumi-aws resources, its own Pulumi.yaml and its own config
namespace. It is the same mechanism: the program runs through
`gpuforge.plan.run.run_program` and its registrations go to
`gpuforge.policies.runner.run_policies`, except that the program runs in a child
process (`child`, over the pipe of `channel`), so that it cannot reach the verdict or
the exit code. What differs is what a foreign program needs: `project` reads its
Pulumi.yaml and stack config as the Pulumi CLI does, `mocks` answer the lookups such
programs make (an AMI lookup only ever resolves to a catalogued AMI when its filters
pin one), `answers` reads the file a user gives for any other lookup, `check` runs
it (`child` turns whatever the program raises into an error naming the file and
line), and `render`/`cli` print it like `gpuforge plan`. The pytest plugin
(`gpuforge.pytest_plugin`) calls `check` too.
"""
