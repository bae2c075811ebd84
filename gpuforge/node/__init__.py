"""The node agent: `gpuforge node check`, the boot-time health gate of a GPU node.

A synchronous training job runs at the pace of its slowest node, so each node
checks itself before it joins: GPUs, driver versions, kernel modules and
services, EFA devices, Xid history, PCIe/NVLink topology, and local storage.
A failing node can mark itself Unhealthy in its Auto Scaling group so that it
is replaced rather than merely logged.

Everything here uses the standard library only: the agent runs on bare GPU
nodes. The one exception, `gpuforge.node.asg`, imports boto3 lazily and only
when `--report-asg` is given.
"""
