"""`gpuforge usage`: who held the GPUs, how well they were used, what reserved capacity went unused,
and what it cost, over a time window (README, "Usage and cost").

Sources: Slurm's accounting (`sacct --json`, `sacctmgr show event`), the metrics layer's per-job
recording rules in Prometheus, the stack config (capacity type, node count) with the hardware
catalog (GPUs per node), and prices (the AWS Price List API or gpuforge/data/prices.yaml).
"""
