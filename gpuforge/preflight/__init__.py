"""`gpuforge preflight`: check the real AWS account before `pulumi up`.

GPU capacity is scarce and booked by the hour; an update that fails twenty minutes
in, on a quota or an expired Capacity Block, wastes a window that was paid for.
Preflight reads the stack's config and asks AWS (boto3, standard credential chain,
read-only calls) whether the instance type, quota, reservation or Capacity Block,
AMI and S3 data repository are what the stack expects.

Modules: `report` (the verdicts and their rendering), `aws` (clients, IAM actions,
AWS errors as verdicts), one module per check (`offering`, `quota`, `capacity`,
`ami`, `storage`), `run` (runs them all) and `cli`.
"""
