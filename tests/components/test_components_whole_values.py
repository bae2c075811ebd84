"""The components' specs read every id, name and ARN whole, in ASCII.

`$` under re.match accepts a value that ends in a newline and `\\d` any Unicode digit; such a value
would pass the spec and reach AWS (or a rendered file) as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuforge.components.specs import AmiPin, BucketSpec, LustreSpec, NetworkSpec
from gpuforge.errors import InputError

AMI = {
    "ami_id": "ami-0123456789abcdef0",
    "region": "us-east-1",
    "matrix_name": "p5-h100-cuda12",
    "matrix_version": "1.0.0",
    "matrix_digest": "0" * 64,
}
KMS = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
LUSTRE = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 4800, "throughput_per_tib": 250}

CASES: list[tuple[str, Callable[[str], Any], str]] = [
    ("ami_id", lambda v: AmiPin(**{**AMI, "ami_id": v}), AMI["ami_id"]),
    ("region", lambda v: AmiPin(**{**AMI, "region": v}), AMI["region"]),
    ("matrix_digest", lambda v: AmiPin(**{**AMI, "matrix_digest": v}), AMI["matrix_digest"]),
    (
        "vpc_id",
        lambda v: NetworkSpec(vpc_id=v, subnet_id="subnet-0123456789abcdef0", api_access="existing"),
        "vpc-0123456789abcdef0",
    ),
    (
        "subnet_id",
        lambda v: NetworkSpec(vpc_id="vpc-0123456789abcdef0", subnet_id=v, api_access="existing"),
        "subnet-0123456789abcdef0",
    ),
    ("bucket_name", lambda v: BucketSpec(bucket_name=v), "training-data"),
    ("bucket_kms", lambda v: BucketSpec(kms_key_arn=v), KMS),
    ("lustre_kms", lambda v: LustreSpec(**LUSTRE, kms_key_arn=v), KMS),
    ("s3_path", lambda v: LustreSpec(**LUSTRE, s3_path=v), "s3://training-data/shards"),
]


@pytest.mark.parametrize(("field", "make", "good"), CASES, ids=[case[0] for case in CASES])
def test_a_value_is_read_whole(field: str, make: Callable[[str], Any], good: str) -> None:
    make(good)  # the value itself passes
    with pytest.raises((InputError, ValueError)):
        make(good + "\n")


@pytest.mark.parametrize("field", ["region", "ami_id"])
def test_a_unicode_digit_is_not_a_digit(field: str) -> None:
    value = AMI[field]
    first = next(i for i, char in enumerate(value) if char in "0123456789")
    with pytest.raises((InputError, ValueError)):
        AmiPin(**{**AMI, field: value[:first] + chr(0x660 + int(value[first])) + value[first + 1 :]})
