"""Shared pieces of the preflight tests: stack files, AWS clients, and Stubber responses.

moto 5.2.5 implements DescribeInstanceTypeOfferings, DescribeInstanceTypes,
DescribeInstances, DescribeImages and S3, so those calls go to moto's server on
127.0.0.1. It does not implement DescribeCapacityReservations (Capacity
Reservations and Capacity Blocks), and its Service Quotas answers
NoSuchResourceException for every EC2 quota. Those calls are answered by
botocore's Stubber on clients of their own, with responses shaped like the
examples in AWS's API reference:
- https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html
  (CapacityReservation: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html)
- https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html
  and API_GetAWSDefaultServiceQuota.html (ServiceQuota structure).
Stubber checks each queued response against botocore's service model, so a
response of the wrong shape fails the test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import yaml
from botocore.config import Config
from botocore.stub import Stubber

REPO = Path(__file__).resolve().parents[2]
MATRICES = REPO / "images" / "matrices"
P5_MATRIX = MATRICES / "p5-h100-cuda12.yaml"
REGION = "us-east-1"
ZONE = "us-east-1a"
ACCOUNT = "123456789012"
RESERVATION_ID = "cr-0a1b2c3d4e5f60718"
BLOCK_START = datetime(2030, 1, 7, 11, 30, tzinfo=UTC)
BLOCK_END = datetime(2030, 1, 21, 11, 30, tzinfo=UTC)
# The same timezone-aware "now" for every test that needs one: three days into the block.
NOW = datetime(2030, 1, 10, 12, 0, tzinfo=UTC)
RETRIES = Config(retries={"mode": "standard"})


def stack_config(**overrides: Any) -> dict[str, Any]:
    """A p5.48xlarge stack's config (on-demand, no Lustre); `None` removes a key."""
    config: dict[str, Any] = {
        "aws:region": REGION,
        "gpuforge:matrix": str(P5_MATRIX),
        "gpuforge:instanceType": "p5.48xlarge",
        "gpuforge:nodeCount": 2,
        "gpuforge:nodeMode": "asg",
        "gpuforge:availabilityZone": ZONE,
        "gpuforge:capacity": {"type": "on-demand"},
    }
    config.update(overrides)
    return {key: value for key, value in config.items() if value is not None}


def block_capacity(**overrides: Any) -> dict[str, Any]:
    capacity = {
        "type": "capacity-block",
        "reservationId": RESERVATION_ID,
        "start": BLOCK_START.isoformat().replace("+00:00", "Z"),
        "end": BLOCK_END.isoformat().replace("+00:00", "Z"),
    }
    capacity.update(overrides)
    return capacity


def write_stack(directory: Path, config: dict[str, Any], stack: str = "test") -> Path:
    """A Pulumi project directory holding Pulumi.<stack>.yaml with `config`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
    (directory / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return directory


def client(service: str, endpoint: str, region: str = REGION) -> Any:
    """A boto3 client against moto's server, with the retry mode preflight uses."""
    return boto3.client(service, region_name=region, endpoint_url=endpoint, config=RETRIES)


def stubbed(service: str, endpoint: str) -> tuple[Any, Stubber]:
    """A client whose every call is answered by an activated Stubber (no request leaves it)."""
    stubbed_client = client(service, endpoint)
    stubber = Stubber(stubbed_client)
    stubber.activate()
    return stubbed_client, stubber


def capacity_reservation(**overrides: Any) -> dict[str, Any]:
    """One CapacityReservation as DescribeCapacityReservations returns it (an active, targeted ODCR)."""
    reservation: dict[str, Any] = {
        "CapacityReservationId": RESERVATION_ID,
        "OwnerId": ACCOUNT,
        "CapacityReservationArn": f"arn:aws:ec2:{REGION}:{ACCOUNT}:capacity-reservation/{RESERVATION_ID}",
        "AvailabilityZoneId": "use1-az6",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": ZONE,
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": datetime(2029, 12, 1, 9, 0, tzinfo=UTC),
        "EndDateType": "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": datetime(2029, 12, 1, 9, 0, tzinfo=UTC),
        "Tags": [],
        "ReservationType": "default",
    }
    reservation.update(overrides)
    return reservation


def capacity_block(**overrides: Any) -> dict[str, Any]:
    """A Capacity Block as DescribeCapacityReservations returns it: limited, targeted, with its dates."""
    block = capacity_reservation(
        ReservationType="capacity-block",
        StartDate=BLOCK_START,
        EndDate=BLOCK_END,
        EndDateType="limited",
        CreateDate=datetime(2029, 12, 20, 8, 0, tzinfo=UTC),
        CapacityBlockId="cb-0123456789abcdef0",
    )
    block.update(overrides)
    return block


def reservations(*items: dict[str, Any]) -> dict[str, Any]:
    return {"CapacityReservations": list(items)}


def by_id(reservation_id: str = RESERVATION_ID) -> dict[str, Any]:
    """The parameters preflight sends to look up the stack's reservation."""
    return {"CapacityReservationIds": [reservation_id]}


ACTIVE_FILTER = {"Filters": [{"Name": "state", "Values": ["active"]}]}


def service_quota(code: str, name: str, value: float, *, default: bool = False) -> dict[str, Any]:
    """A GetServiceQuota / GetAWSDefaultServiceQuota response for an EC2 On-Demand vCPU quota."""
    account = "" if default else ACCOUNT
    usage_class = "P/OnDemand" if code == "L-417A185B" else "G/OnDemand"
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:{account}:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {
                    "Class": usage_class,
                    "Resource": "vCPU",
                    "Service": "EC2",
                    "Type": "Resource",
                },
                "MetricStatisticRecommendation": "Maximum",
            },
        }
    }


P_QUOTA_PARAMS = {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}


def p_quota(value: float) -> dict[str, Any]:
    return service_quota("L-417A185B", "Running On-Demand P instances", value)
