"""boto3 clients for preflight, the IAM actions it needs, and AWS errors as check verdicts.

Clients are built once per service from one boto3 session, so the standard
credential chain applies (AWS_PROFILE, SSO, access keys, container and instance
roles) and boto3 itself honours AWS_ENDPOINT_URL and AWS_MAX_ATTEMPTS. Retries are
botocore's `standard` mode; preflight has no retry loop of its own.

Every call preflight makes is read-only. `IAM_ACTIONS` maps each API operation to
the IAM action it needs, so an AccessDenied names the permission to grant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuforge.aws_session import client, open_session
from gpuforge.preflight.report import Check, fail

if TYPE_CHECKING:
    from botocore.exceptions import ClientError
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_service_quotas import ServiceQuotasClient

    from gpuforge.deadline import Deadline

# Per call, at most (and never past the deadline).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0

# API operation -> the IAM action that allows it. Each is the action of the same
# name, except S3's HeadBucket and ListObjectsV2, which need s3:ListBucket
# (https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html,
# https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html).
IAM_ACTIONS: Mapping[str, str] = {
    "DescribeInstanceTypeOfferings": "ec2:DescribeInstanceTypeOfferings",
    "DescribeInstanceTypes": "ec2:DescribeInstanceTypes",
    "DescribeInstances": "ec2:DescribeInstances",
    "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
    "DescribeImages": "ec2:DescribeImages",
    "GetServiceQuota": "servicequotas:GetServiceQuota",
    "GetAWSDefaultServiceQuota": "servicequotas:GetAWSDefaultServiceQuota",
    "HeadBucket": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
}

# Error codes AWS returns for a call the credentials may not make: EC2 answers
# UnauthorizedOperation, Service Quotas AccessDeniedException, S3 AccessDenied.
# (HeadBucket has no response body; its bare 403 is read in the bucket check.)
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


@dataclass(frozen=True)
class AwsClients:
    """The clients preflight uses, one per service.

    `capacity` serves the Capacity Reservation calls. Outside tests it is the same
    client object as `ec2`; it is a separate field because moto does not implement
    those calls, so tests answer them with botocore's Stubber on a client of their
    own while the other EC2 calls go to moto's server.
    """

    ec2: EC2Client
    capacity: EC2Client
    quotas: ServiceQuotasClient
    s3: S3Client

    @classmethod
    def create(cls, region: str, deadline: Deadline) -> AwsClients:
        """Clients for `region` from the standard credential chain (gpuforge.aws_session: exit 2 without
        credentials or with an AWS configuration botocore cannot use), their timeouts cut from `deadline`."""
        from botocore.config import Config

        command = "gpuforge preflight"
        session = open_session(region, command=command)
        config = Config(
            connect_timeout=deadline.timeout(CONNECT_TIMEOUT_S),
            read_timeout=deadline.timeout(READ_TIMEOUT_S),
            retries={"mode": "standard"},
        )
        ec2 = client(session, "ec2", command=command, config=config)
        return cls(
            ec2=ec2,
            capacity=ec2,
            quotas=client(session, "service-quotas", command=command, config=config),
            s3=client(session, "s3", command=command, config=config),
        )


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def iam_action(operation: str) -> str:
    return IAM_ACTIONS.get(operation, operation)


def is_throttled(error: ClientError) -> bool:
    """Whether AWS throttled the call, by the same rule botocore's standard retry mode uses."""
    from botocore.retries.standard import RetryContext, ThrottledRetryableChecker

    parsed: Any = error.response
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    context = RetryContext(attempt_number=1, parsed_response=parsed)
    return status == 429 or ThrottledRetryableChecker().is_retryable(context)


def failed_call(check_id: str, error: ClientError) -> Check:
    """A failed check for an AWS error that the check itself does not handle."""
    code = error_code(error)
    operation = error.operation_name
    action = iam_action(operation)
    if code in ACCESS_DENIED_CODES:
        return fail(
            check_id,
            f"AWS denied {operation} ({code}): the credentials in use lack the IAM permission {action}.",
            f"allow {action} for the role or user running preflight "
            "(gpuforge.preflight.aws.IAM_ACTIONS lists every read-only action preflight needs).",
        )
    if is_throttled(error):
        retries = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        return fail(
            check_id,
            f"AWS throttled {operation} ({code}) and botocore's standard retry mode gave up after "
            f"{retries} retries.",
            "run preflight again in a minute; set AWS_MAX_ATTEMPTS (e.g. 10) to let botocore retry longer.",
        )
    detail = _short(error.response.get("Error", {}).get("Message", ""))
    return fail(
        check_id,
        f"{operation} failed: {code}" + (f": {detail}" if detail else "") + ".",
        f"resolve the AWS error above ({action}), then run preflight again.",
    )


def _short(message: str, limit: int = 200) -> str:
    """An error message on one line; an HTML error page (from a proxy or an emulator) is left out."""
    if message.lstrip().startswith("<"):
        return "(the endpoint answered with an HTML error page)"
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
