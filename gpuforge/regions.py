"""Which AWS regions exist: botocore's endpoint data, not a list kept by hand.

A region name of the right shape that AWS does not have (`us-east-9`) would pass a regular
expression and fail only at the first AWS call, after a build has run for an hour, or never,
under an emulator that answers for any name. botocore ships AWS's partition and endpoint
data (`botocore/data/endpoints.json`) and is updated with it, so a region AWS opened since
the installed botocore is the one false refusal, and its fix is to upgrade botocore.
"""

from __future__ import annotations

import functools

from gpuforge.display import cut
from gpuforge.errors import InputError


@functools.cache
def aws_regions() -> frozenset[str]:
    """Every region, in every AWS partition (aws, aws-cn, aws-us-gov, ...), where botocore lists EC2.

    Read from botocore's data alone (`offline_session`): AWS_PROFILE naming no profile must not stop a check
    of a region name, which calls no AWS."""
    from gpuforge.aws_session import offline_session

    session = offline_session()
    return frozenset(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("ec2", partition_name=partition)
    )


def is_region(name: str) -> bool:
    return name in aws_regions()


def region_problem(name: str) -> str | None:
    """Why `name` is no AWS region, with the fix; None when it is one."""
    if is_region(name):
        return None
    import botocore

    if not name.strip():
        return (
            "an empty region name. Fix: name regions such as us-west-2, separated by commas, "
            "or leave the flag out"
        )
    return (
        f"{cut(name)} is not a region AWS has (botocore {botocore.__version__}'s endpoint data lists "
        f"{', '.join(sorted(aws_regions()))}). Fix: name a region from that list, e.g. us-west-2; for a "
        "region AWS opened since, upgrade botocore"
    )


def check_region(where: str, name: str) -> None:
    """InputError (exit 2) naming `where` (the flag or field that gave it) unless `name` is a region AWS has."""
    problem = region_problem(name)
    if problem is not None:
        raise InputError(f"{where}: {problem}.")
