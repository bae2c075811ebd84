"""Run every preflight check for one stack and collect the verdicts.

Each check runs on its own: an AWS error in one (AccessDenied, throttling, an
unreachable endpoint) becomes that check's failure and the others still run.
Missing credentials stop the whole run (exit 2), since no check can succeed.
`now` and the local time zone are parameters so tests can fix them.

Every AWS wait is bounded by one deadline (`--timeout`, gpuforge.deadline): the clients' timeouts are cut from
it, and a check still waiting when it passes fails with the step named, as does every check after it ("not
run"), so the report is still printed: an endpoint that accepts and never answers held preflight for minutes
per call (botocore's 60 s read timeout, three attempts).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from pathlib import Path

from gpuforge import hardware
from gpuforge.aws_session import setup_error
from gpuforge.components.specs import AmiPin
from gpuforge.deadline import DEFAULT_COMMAND_TIMEOUT_S, Deadline, DeadlineExceeded
from gpuforge.errors import GpuforgeError
from gpuforge.images.catalog import DEFAULT_CATALOG, read_catalog
from gpuforge.preflight import ami, capacity, offering, quota, storage
from gpuforge.preflight.aws import AwsClients, failed_call
from gpuforge.preflight.report import Check, fail
from gpuforge.stack_config import NAMESPACE, StackConfig, load_stack_config, resolve_ami


def resolve_image(config: StackConfig, catalog: Path | None) -> AmiPin | str:
    """The stack's AMI from the image catalog (`catalog` overrides gpuforge:catalog), or why there is none."""
    if catalog is not None:
        config = config.model_copy(update={"catalog_path": catalog.resolve()})
    try:
        return resolve_ami(config)
    except GpuforgeError as error:
        return error.message


def _guarded(check_id: str, step: Callable[[], Check], deadline: Deadline | None) -> Check:
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    if deadline is not None:
        if deadline.left() <= 0:
            return fail(
                check_id,
                f"not run: the command's deadline of {deadline.seconds:g} s ({deadline.flag}) passed before it.",
                f"run preflight again (a slow link to AWS: pass a longer {deadline.flag}).",
            )
        deadline.doing = f"the {check_id} check"
    try:
        return step()
    except DeadlineExceeded:
        assert deadline is not None  # only its timer raises it
        return _late(check_id, deadline, "")
    except ClientError as error:
        return failed_call(check_id, error)
    except ResponseParserError:
        return fail(
            check_id,
            "the endpoint's answer is not an AWS API response (an HTML error page from a proxy or an emulator?).",
            "check AWS_ENDPOINT_URL and any proxy settings, then run preflight again.",
        )
    except BotoCoreError as error:
        setup = setup_error(error, "gpuforge preflight")  # credentials that expired or vanished mid-run
        if setup is not None:
            raise setup from None
        if deadline is not None and deadline.left() <= 0:  # a timeout cut from the deadline ran out
            return _late(check_id, deadline, f" ({error})")
        return fail(
            check_id,
            f"the AWS call did not complete: {error}.",
            "check the network path to AWS (and AWS_ENDPOINT_URL, if set), then run preflight again.",
        )


def _late(check_id: str, deadline: Deadline, detail: str) -> Check:
    return fail(
        check_id,
        f"AWS gave no answer within the command's deadline of {deadline.seconds:g} s ({deadline.flag}){detail}.",
        f"run preflight again (a slow link to AWS: pass a longer {deadline.flag}).",
    )


def run_checks(
    config: StackConfig,
    clients: AwsClients,
    *,
    catalog: Path | None = None,
    now: datetime | None = None,
    local: tzinfo | None = None,
    deadline: Deadline | None = None,
) -> list[Check]:
    """Every check's verdict, in a fixed order. `local` None prints times in the system's zone."""
    now = now if now is not None else datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("run_checks needs a timezone-aware `now`")
    instance = hardware.get(config.instance_type)
    image = resolve_image(config, catalog)
    kind = config.capacity.type

    def capacity_check() -> Check:
        if kind == "reservation":
            return capacity.check_reservation(clients.capacity, config, local)
        if kind == "capacity-block":
            return capacity.check_capacity_block(clients.capacity, config, now, local)
        return capacity.check_on_demand()

    def ami_check() -> Check:
        if isinstance(image, str):
            return ami.unresolved(image)
        return ami.check_ami(clients.ec2, config, image)

    steps: list[tuple[str, Callable[[], Check]]] = [
        (offering.OFFERING, lambda: offering.check_offering(clients.ec2, config)),
        (offering.INSTANCE_TYPE, lambda: offering.check_instance_type(clients.ec2, config, instance)),
        (
            quota.QUOTA,
            lambda: quota.check_quota(clients.ec2, clients.capacity, clients.quotas, config, instance),
        ),
        (capacity.CAPACITY, capacity_check),
        (ami.AMI, ami_check),
        (storage.SUBNET, lambda: storage.check_subnet(config, instance)),
        (storage.BUCKET, lambda: storage.check_bucket(clients.s3, config)),
    ]
    # The subnet check reads only the stack and the catalog: the deadline of AWS's answers does not hold it.
    return [
        _guarded(check_id, step, None if check_id == storage.SUBNET else deadline) for check_id, step in steps
    ]


def _read_catalog(config: StackConfig, catalog: Path | None) -> None:
    """A catalog that is missing or not a valid catalog is bad input (exit 2), as for `image list` and `plan`.

    Read here, before any AWS call, with the same reader as every other command: either layout
    (a folder of records or a single .json file). Only a readable catalog without the stack's AMI
    is the `ami` check's failure (exit 1).
    """
    if catalog is not None:
        read_catalog(catalog, given_by="--catalog")
    elif config.catalog_path is not None:
        read_catalog(config.catalog_path, given_by=f"{NAMESPACE}:catalog in {config.source}")
    else:
        read_catalog(DEFAULT_CATALOG)


def preflight(
    stack_dir: Path,
    stack: str,
    *,
    catalog: Path | None = None,
    clients: AwsClients | None = None,
    now: datetime | None = None,
    local: tzinfo | None = None,
    timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
) -> tuple[StackConfig, list[Check]]:
    """Read the stack's config, build the AWS clients (unless given) and run every check, every AWS wait
    within `timeout_s` (the deadline starts once the local files are read).

    Bad config, a missing or invalid catalog and missing credentials raise GpuforgeError (exit 2)
    before any check runs.
    """
    config = load_stack_config(stack_dir, stack)
    _read_catalog(config, catalog)
    deadline = Deadline(timeout_s, "--timeout")
    with deadline.enforced():
        deadline.doing = f"read the AWS credentials for {config.region}"
        clients = clients if clients is not None else AwsClients.create(config.region, deadline)
        checks = run_checks(config, clients, catalog=catalog, now=now, local=local, deadline=deadline)
    return config, checks
