"""Slurm for gpuforge clusters: the scheduler config rendered from the stack and the hardware catalog.

`versions` holds what each Slurm version can do (from `gpuforge/data/slurm.yaml`),
`spec` the `gpuforge:scheduler` block, `render` the files Slurm reads, and
`topology` the network topology AWS reports. The controller component, the image
and the matrix rules read these modules; none of them writes a Slurm setting itself.
"""
