"""The instance's identity from IMDSv2: a session token (PUT), then metadata reads (GET).

The endpoint defaults to 169.254.169.254 and honours botocore's own override,
AWS_EC2_METADATA_SERVICE_ENDPOINT, so that tests (and boto3 in --report-asg)
point at the same loopback server. Timeouts are short: at boot a missing
IMDS must fail fast, not hang the gate.
Source: "Use the Instance Metadata Service to access instance metadata" (IMDSv2),
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from gpuforge.errors import GpuforgeError

ENDPOINT_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TOKEN_TTL_S = 300
TIMEOUT_S = 2.0


class ImdsError(GpuforgeError):
    """IMDS did not answer; the node cannot name its own type or instance id."""

    exit_code = 1


@dataclass(frozen=True)
class Identity:
    instance_id: str
    instance_type: str
    region: str


@dataclass(frozen=True)
class ImdsClient:
    endpoint: str = ""
    timeout_s: float = TIMEOUT_S

    @property
    def base(self) -> str:
        return (self.endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")

    def _open(self, request: urllib.request.Request) -> str:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body: bytes = response.read()
                return body.decode("utf-8").strip()
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ImdsError(
                f"IMDSv2 at {self.base} did not answer {request.get_method()} {request.full_url}: {reason}. "
                "Fix: run on an EC2 instance with the metadata service enabled (HttpTokens=required is fine, "
                "hop limit 1 or more), or pass --expect INSTANCE_TYPE."
            ) from error

    def token(self) -> str:
        request = urllib.request.Request(
            self.base + TOKEN_PATH, method="PUT", headers={TOKEN_TTL_HEADER: str(TOKEN_TTL_S)}
        )
        return self._open(request)

    def get(self, path: str, token: str) -> str:
        request = urllib.request.Request(
            f"{self.base}/latest/meta-data/{path}", headers={TOKEN_HEADER: token}
        )
        return self._open(request)

    def identity(self) -> Identity:
        token = self.token()
        return Identity(
            instance_id=self.get("instance-id", token),
            instance_type=self.get("instance-type", token),
            region=self.get("placement/region", token),
        )
