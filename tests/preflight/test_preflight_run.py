"""Every preflight check, run together against moto's server on 127.0.0.1.

Offerings, instance types, running instances, AMIs (with tags) and S3 are moto's,
over real HTTP with real botocore. DescribeCapacityReservations and Service Quotas
for EC2 are not implemented by moto 5.2.5 (its GetServiceQuota raises
NoSuchResourceException for EC2), so those two clients are botocore Stubbers with
responses shaped after AWS's API reference (preflight_cases); each test queues the
calls it expects, in order, and checks they were all made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from preflight_cases import (
    ACTIVE_FILTER,
    BLOCK_END,
    MATRICES,
    NOW,
    P5_MATRIX,
    P_QUOTA_PARAMS,
    REGION,
    RESERVATION_ID,
    block_capacity,
    by_id,
    capacity_block,
    capacity_reservation,
    client,
    p_quota,
    reservations,
    service_quota,
    stack_config,
    stubbed,
    write_stack,
)

from gpuforge.errors import GpuforgeError
from gpuforge.images.catalog import CatalogEntry, record_entry
from gpuforge.images.matrix import load_valid
from gpuforge.images.tags import MATRIX_DIGEST_TAG
from gpuforge.preflight.aws import AwsClients
from gpuforge.preflight.cli import emit
from gpuforge.preflight.report import Check, Status
from gpuforge.preflight.run import preflight

IDS = ["offering", "instance-type", "quota", "capacity", "ami", "subnet", "bucket"]
DATA_BUCKET, EU_BUCKET = "gpuforge-train-data", "gpuforge-train-data-eu"
LUSTRE = {"deploymentType": "PERSISTENT_2", "storageCapacityGiB": 2400, "throughputPerTiB": 250}


@dataclass(frozen=True)
class World:
    """What the module seeds into moto: images, buckets, and image catalogs pointing at them."""

    endpoint: str
    digest: str
    good_ami: str
    catalog: Path  # p5 matrix -> an available AMI tagged with its digest
    wrong_digest_catalog: Path  # p5 matrix -> an AMI tagged with another digest
    missing_ami_catalog: Path  # p5 matrix -> an AMI id that does not exist
    empty_catalog: Path


def _entry(ami_id: str, digest: str) -> CatalogEntry:
    return CatalogEntry(
        ami_id=ami_id,
        region=REGION,
        matrix_name="p5-h100-cuda12",
        matrix_version="1",
        matrix_digest=digest,
        built_at="2029-12-01T00:00:00+00:00",
        packer_version="1.11.2",
    )


def _image(ec2: Any, name: str, digest: str) -> str:
    image_id = str(
        ec2.register_image(
            Name=name,
            RootDeviceName="/dev/sda1",
            BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}],
            Architecture="x86_64",
        )["ImageId"]
    )
    ec2.create_tags(Resources=[image_id], Tags=[{"Key": MATRIX_DIGEST_TAG, "Value": digest}])
    return image_id


@pytest.fixture(scope="module")
def world(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> World:
    ec2 = client("ec2", moto_endpoint)
    _, digest = load_valid(P5_MATRIX)
    good = _image(ec2, "gpuforge-p5-h100-cuda12", digest)
    wrong = _image(ec2, "gpuforge-p5-other", "0" * 64)
    s3 = client("s3", moto_endpoint)
    s3.create_bucket(Bucket=DATA_BUCKET)
    s3.put_object(Bucket=DATA_BUCKET, Key="shards/part-00000.tar", Body=b"shard")
    client("s3", moto_endpoint, "eu-west-1").create_bucket(
        Bucket=EU_BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    root = tmp_path_factory.mktemp("catalogs")
    catalogs = {}
    for name, ami_id in (("good", good), ("wrong", wrong), ("missing", "ami-0123456789abcdef0")):
        catalogs[name] = root / f"{name}.json"
        record_entry(catalogs[name], _entry(ami_id, digest))
    empty = root / "empty.json"
    empty.write_text('{"schema": 1, "images": {}}\n', encoding="utf-8")
    return World(moto_endpoint, digest, good, catalogs["good"], catalogs["wrong"], catalogs["missing"], empty)


@dataclass
class Aws:
    clients: AwsClients
    capacity: Stubber
    quotas: Stubber


@pytest.fixture(scope="module")
def moto_clients(world: World) -> tuple[Any, Any]:
    """The EC2 and S3 clients that talk to moto, built once for the module."""
    return client("ec2", world.endpoint), client("s3", world.endpoint)


@pytest.fixture
def aws(world: World, moto_clients: tuple[Any, Any]) -> Iterator[Aws]:
    """moto for EC2 and S3; fresh Stubbers for the Capacity Reservation and Service Quotas calls."""
    capacity, capacity_stub = stubbed("ec2", world.endpoint)
    quotas, quotas_stub = stubbed("service-quotas", world.endpoint)
    ec2, s3 = moto_clients
    clients = AwsClients(ec2=ec2, capacity=capacity, quotas=quotas, s3=s3)
    yield Aws(clients, capacity_stub, quotas_stub)
    capacity_stub.assert_no_pending_responses()
    quotas_stub.assert_no_pending_responses()


def _run(
    tmp_path: Path, aws: Aws, catalog: Path, *, now: Any = NOW, **overrides: Any
) -> tuple[Any, dict[str, Check]]:
    stack_dir = write_stack(tmp_path / "stack", stack_config(**overrides))
    config, checks = preflight(stack_dir, "test", catalog=catalog, clients=aws.clients, now=now, local=UTC)
    assert [check.id for check in checks] == IDS
    return config, {check.id: check for check in checks}


def _quota_calls(aws: Aws, value: float, *active: dict[str, Any]) -> None:
    aws.capacity.add_response("describe_capacity_reservations", reservations(*active), ACTIVE_FILTER)
    aws.quotas.add_response("get_service_quota", p_quota(value), P_QUOTA_PARAMS)


def _not_ok(checks: dict[str, Check]) -> dict[str, str]:
    return {check_id: check.text for check_id, check in checks.items() if check.status is not Status.OK}


# --- the happy paths -------------------------------------------------------------------------


def test_on_demand_stack_passes_every_check_and_prints_json(
    tmp_path: Path, aws: Aws, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    _quota_calls(aws, 1536)
    lustre = {**LUSTRE, "s3Path": f"s3://{DATA_BUCKET}/shards/"}
    config, checks = _run(tmp_path, aws, world.catalog, **{"gpuforge:lustre": lustre})
    assert _not_ok(checks) == {}
    assert "p5.48xlarge is offered in us-east-1a" in checks["offering"].message
    assert "EFA supported (32 interface(s) per node, AWS allows 32)" in checks["instance-type"].message
    assert "cluster placement supported" in checks["instance-type"].message
    assert "limit 1536 vCPUs (applied)" in checks["quota"].message
    assert "the stack adds 2 x p5.48xlarge = 384 vCPUs; total 384" in checks["quota"].message
    assert f"AMI {world.good_ami}" in checks["ami"].message and "matches the matrix" in checks["ami"].message
    assert "created by the stack" in checks["subnet"].message
    assert "2 nodes will take 2 private IPs" in checks["subnet"].message
    assert "exists in us-east-1" in checks["bucket"].message
    assert "objects exist under 'shards/'" in checks["bucket"].message

    assert emit(config, list(checks.values()), as_json=True) == 0
    document = json.loads(capsys.readouterr().out)
    assert [set(item) for item in document["checks"]] == [{"id", "status", "message"}] * len(IDS)
    assert [item["status"] for item in document["checks"]] == ["ok"] * len(IDS)
    assert emit(config, list(checks.values()), as_json=False) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("preflight of stack test (")
    assert [line.split()[:2] for line in text[1:-1]] == [["ok", check_id] for check_id in IDS]
    assert text[-1] == "preflight passed: 0 failed, 0 warnings, 7 checks"


def test_capacity_block_stack_passes_while_the_block_runs(tmp_path: Path, aws: Aws, world: World) -> None:
    block = capacity_block()
    _quota_calls(aws, 1536, block)
    aws.capacity.add_response("describe_capacity_reservations", reservations(block), by_id())
    _, checks = _run(tmp_path, aws, world.catalog, **{"gpuforge:capacity": block_capacity()})
    assert _not_ok(checks) == {}
    assert "active: 10 d 22 h 45 min left" in checks["capacity"].message
    assert "no cluster placement group needed" in checks["instance-type"].message
    assert "in use 0 by running On-Demand instances + 0 by active On-Demand Capacity Reservations" in (
        checks["quota"].message
    )


# --- quota -----------------------------------------------------------------------------------


def test_quota_too_low_fails_with_the_increase_command(tmp_path: Path, aws: Aws, world: World) -> None:
    _quota_calls(aws, 192)
    config, checks = _run(tmp_path, aws, world.catalog)
    assert _not_ok(checks).keys() == {"quota"}
    quota = checks["quota"]
    assert quota.status is Status.FAIL
    assert "total 384 > 192" in quota.message
    assert quota.fix is not None
    assert "--quota-code L-417A185B --desired-value 384 --region us-east-1" in quota.fix
    assert emit(config, list(checks.values()), as_json=True) == 1


def test_quota_falls_back_to_the_aws_default(tmp_path: Path, aws: Aws, world: World) -> None:
    aws.capacity.add_response("describe_capacity_reservations", reservations(), ACTIVE_FILTER)
    aws.quotas.add_client_error(
        "get_service_quota",
        service_error_code="NoSuchResourceException",
        service_message="The request failed because the specified service quota does not exist.",
        http_status_code=400,
        expected_params=P_QUOTA_PARAMS,
    )
    default = service_quota("L-417A185B", "Running On-Demand P instances", 384.0, default=True)
    aws.quotas.add_response("get_aws_default_service_quota", default, P_QUOTA_PARAMS)
    _, checks = _run(tmp_path, aws, world.catalog)
    assert checks["quota"].status is Status.OK, checks["quota"].text
    assert "limit 384 vCPUs (AWS default)" in checks["quota"].message


def test_quota_counts_running_instances_and_whole_reservations(
    tmp_path: Path, aws: Aws, world: World
) -> None:
    ec2 = client("ec2", world.endpoint)
    launched = [
        instance["InstanceId"]
        for instance_type, count in (("p4d.24xlarge", 2), ("g5.xlarge", 1))
        for instance in ec2.run_instances(
            ImageId=world.good_ami, InstanceType=instance_type, MinCount=count, MaxCount=count
        )["Instances"]
    ]
    try:
        odcr = capacity_reservation(CapacityReservationId="cr-0aaaaaaaaaaaaaaaa", TotalInstanceCount=3)
        other_family = capacity_reservation(
            CapacityReservationId="cr-0bbbbbbbbbbbbbbbb", InstanceType="g6.xlarge", TotalInstanceCount=10
        )
        _quota_calls(aws, 1000, odcr, capacity_block(), other_family)
        _, checks = _run(tmp_path, aws, world.catalog)
    finally:
        ec2.terminate_instances(InstanceIds=launched)
    quota = checks["quota"]
    # 2 x p4d.24xlarge (96 vCPUs each) run On-Demand; the ODCR holds 3 x 192 whether used or not;
    # the g5 instance and g6 reservation are another quota's, the Capacity Block has its own limits.
    assert "in use 192 by running On-Demand instances + 576 by active On-Demand Capacity Reservations" in (
        quota.message
    )
    assert "total 1152 > 1000" in quota.message
    assert quota.status is Status.FAIL


def test_nodes_launched_into_an_active_reservation_are_not_counted_twice(
    tmp_path: Path, aws: Aws, world: World
) -> None:
    odcr = capacity_reservation(TotalInstanceCount=2)
    _quota_calls(aws, 384, odcr)
    aws.capacity.add_response("describe_capacity_reservations", reservations(odcr), by_id())
    capacity = {"type": "reservation", "reservationId": RESERVATION_ID}
    _, checks = _run(
        tmp_path, aws, world.catalog, **{"gpuforge:capacity": capacity, "gpuforge:nodeMode": "instances"}
    )
    assert _not_ok(checks) == {}
    assert f"launch into reservation {RESERVATION_ID}, already counted" in checks["quota"].message
    assert "+ 384 by active On-Demand Capacity Reservations" in checks["quota"].message


def test_low_quota_for_a_capacity_block_is_a_warning(tmp_path: Path, aws: Aws, world: World) -> None:
    block = capacity_block()
    _quota_calls(aws, 0, block)
    aws.capacity.add_response("describe_capacity_reservations", reservations(block), by_id())
    config, checks = _run(tmp_path, aws, world.catalog, **{"gpuforge:capacity": block_capacity()})
    quota = checks["quota"]
    assert quota.status is Status.WARN
    assert "64 instances per block, 256 across blocks" in quota.message
    assert "does not document whether block instances also count" in quota.message
    assert emit(config, list(checks.values()), as_json=True) == 0


# --- offering, capacity, AMI, bucket failures ------------------------------------------------


def test_type_not_offered_in_the_zone_lists_the_zones_that_offer_it(
    tmp_path: Path, aws: Aws, world: World
) -> None:
    _quota_calls(aws, 1536)
    _, checks = _run(
        tmp_path,
        aws,
        world.catalog,
        **{
            "gpuforge:instanceType": "p6-b200.48xlarge",
            "gpuforge:matrix": str(MATRICES / "p6-b200-cuda12.yaml"),
        },
    )
    offering = checks["offering"]
    assert offering.status is Status.FAIL
    # moto's copy of AWS's offerings has p6-b200.48xlarge in us-east-1c only.
    assert "p6-b200.48xlarge is not offered in us-east-1a" in offering.message
    assert "in us-east-1 it is offered in us-east-1c" in offering.message
    assert "8 interface(s) per node" in checks["instance-type"].message


def test_expired_block_fails_the_run(tmp_path: Path, aws: Aws, world: World) -> None:
    block = capacity_block(State="expired")
    _quota_calls(aws, 1536)
    aws.capacity.add_response("describe_capacity_reservations", reservations(block), by_id())
    config, checks = _run(
        tmp_path,
        aws,
        world.catalog,
        now=BLOCK_END + timedelta(days=1),
        **{"gpuforge:capacity": block_capacity()},
    )
    assert _not_ok(checks).keys() == {"capacity"}
    assert "the block ended 2030-01-21 11:30 UTC" in checks["capacity"].message
    assert emit(config, list(checks.values()), as_json=True) == 1


def test_ami_with_another_matrix_digest_fails(tmp_path: Path, aws: Aws, world: World) -> None:
    _quota_calls(aws, 1536)
    _, checks = _run(tmp_path, aws, world.wrong_digest_catalog)
    ami = checks["ami"]
    assert ami.status is Status.FAIL
    assert f"its {MATRIX_DIGEST_TAG} tag is {'0' * 64}" in ami.message
    assert f"has digest {world.digest}" in ami.message


def test_ami_missing_from_the_region_fails(tmp_path: Path, aws: Aws, world: World) -> None:
    _quota_calls(aws, 1536)
    _, checks = _run(tmp_path, aws, world.missing_ami_catalog)
    assert checks["ami"].status is Status.FAIL
    assert "AMI ami-0123456789abcdef0" in checks["ami"].message
    assert "does not exist in us-east-1" in checks["ami"].message


def test_catalog_folder_layout_is_read_as_the_single_file_is(tmp_path: Path, aws: Aws, world: World) -> None:
    """`--catalog DIR`: the default layout (a folder of records), not only a single .json file."""
    folder = tmp_path / "catalog"
    record_entry(folder, _entry(world.good_ami, world.digest))
    assert folder.is_dir()
    _quota_calls(aws, 1536)
    _, checks = _run(tmp_path, aws, folder)
    assert checks["ami"].status is Status.OK, checks["ami"].text
    assert world.good_ami in checks["ami"].message


def test_matrix_without_a_catalog_entry_fails_the_ami_check(tmp_path: Path, aws: Aws, world: World) -> None:
    _quota_calls(aws, 1536)
    _, checks = _run(tmp_path, aws, world.empty_catalog)
    assert checks["ami"].status is Status.FAIL
    assert "has no AMI for matrix" in checks["ami"].message
    assert "gpuforge image build" in checks["ami"].message


@pytest.mark.parametrize(
    ("s3_path", "status", "expected"),
    [
        (
            "s3://gpuforge-no-such-bucket/data/",
            Status.FAIL,
            "bucket 'gpuforge-no-such-bucket' does not exist",
        ),
        (
            f"s3://{EU_BUCKET}/data/",
            Status.FAIL,
            f"bucket '{EU_BUCKET}' is in eu-west-1, the file system in us-east-1",
        ),
        (f"s3://{DATA_BUCKET}/shardz/", Status.WARN, "no object's key starts with 'shardz/'"),
        (f"s3://{DATA_BUCKET}", Status.OK, f"bucket '{DATA_BUCKET}' exists in us-east-1"),
    ],
)
def test_lustre_s3_path(
    tmp_path: Path, aws: Aws, world: World, s3_path: str, status: Status, expected: str
) -> None:
    _quota_calls(aws, 1536)
    _, checks = _run(tmp_path, aws, world.catalog, **{"gpuforge:lustre": {**LUSTRE, "s3Path": s3_path}})
    assert checks["bucket"].status is status, checks["bucket"].text
    assert expected in checks["bucket"].message


# --- AWS errors ------------------------------------------------------------------------------


def test_access_denied_names_the_missing_iam_action(tmp_path: Path, aws: Aws, world: World) -> None:
    aws.quotas.add_response("get_service_quota", p_quota(1536), P_QUOTA_PARAMS)
    for _ in range(2):  # the quota check, then the Capacity Block check
        aws.capacity.add_client_error(
            "describe_capacity_reservations",
            service_error_code="UnauthorizedOperation",
            service_message="You are not authorized to perform this operation.",
            http_status_code=403,
        )
    _, checks = _run(tmp_path, aws, world.catalog, **{"gpuforge:capacity": block_capacity()})
    assert _not_ok(checks).keys() == {"quota", "capacity"}
    for check_id in ("quota", "capacity"):
        check = checks[check_id]
        assert check.status is Status.FAIL
        assert "lack the IAM permission ec2:DescribeCapacityReservations" in check.message
        assert check.fix is not None and "allow ec2:DescribeCapacityReservations" in check.fix


def test_access_denied_on_service_quotas(tmp_path: Path, aws: Aws, world: World) -> None:
    aws.quotas.add_client_error(
        "get_service_quota",
        service_error_code="AccessDeniedException",
        service_message="User is not authorized to perform servicequotas:GetServiceQuota",
        http_status_code=400,
    )
    _, checks = _run(tmp_path, aws, world.catalog)
    assert _not_ok(checks).keys() == {"quota"}
    assert "lack the IAM permission servicequotas:GetServiceQuota" in checks["quota"].message


def test_throttling_is_a_failed_check_that_says_so(tmp_path: Path, aws: Aws, world: World) -> None:
    aws.quotas.add_client_error(
        "get_service_quota",
        service_error_code="TooManyRequestsException",
        service_message="Rate exceeded",
        http_status_code=400,
    )
    _, checks = _run(tmp_path, aws, world.catalog)
    quota = checks["quota"]
    assert quota.status is Status.FAIL
    assert "AWS throttled GetServiceQuota (TooManyRequestsException)" in quota.message
    assert quota.fix is not None and "AWS_MAX_ATTEMPTS" in quota.fix


def test_no_credentials_stops_preflight_with_exit_2(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    session = boto3.session.Session(region_name=REGION)
    assert session.get_credentials() is None
    clients = AwsClients(
        ec2=session.client("ec2", endpoint_url=world.endpoint),
        capacity=session.client("ec2", endpoint_url=world.endpoint),
        quotas=session.client("service-quotas", endpoint_url=world.endpoint),
        s3=session.client("s3", endpoint_url=world.endpoint),
    )
    stack_dir = write_stack(tmp_path / "stack", stack_config())
    with pytest.raises(GpuforgeError) as caught:
        preflight(stack_dir, "test", catalog=world.catalog, clients=clients, now=NOW)
    assert caught.value.exit_code == 2
    assert "no AWS credentials found" in caught.value.message
