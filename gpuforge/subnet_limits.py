"""How many nodes one subnet can hold: the bound on every node count gpuforge reads.

A module of its own, free of Pulumi, so that commands that only read a node count (the stack
config loader, `validate report --nodes`) do not import the components to learn it.
"""

from __future__ import annotations

# AWS reserves five addresses of every subnet (the first four and the last), and the largest
# subnet is a /16 (a VPC block is /16 to /28). Each node needs at least one address, so no
# cluster in one subnet (a cluster placement group is one zone, gpuforge uses one subnet)
# can have more nodes than this.
# Source: https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html
SUBNET_RESERVED_ADDRESSES = 5
SUBNET_SIZING_SOURCE = "https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html"
MAX_NODE_COUNT = 2**16 - SUBNET_RESERVED_ADDRESSES
