"""The one way gpuforge makes boto3 sessions and clients, and the one reading of botocore's configuration errors.

botocore reads the AWS configuration (AWS_PROFILE, ~/.aws/config and credentials, AWS_* variables, SSO
tokens, credential_process) lazily, so its mistakes surface wherever it is first read: making the
session, making a client, the first call, or even a lookup of botocore's own endpoint data. A profile that
does not exist (ProfileNotFound: the most common mistake of all), a config file that does not parse,
half a key pair, an expired SSO sign-in, a credential_process that is not installed, a retry mode that is
no mode: each is an environment to fix (exit 2) with the fix named, never a traceback and never a failed
check. So every command that calls AWS makes its session and clients here (`open_session`, `client`),
where the credentials are resolved at once, and reads what a call raises through `setup_error`.

botocore's own data (the regions of endpoints.json, the service models) is read through `offline_session`,
which reads no user configuration: a broken ~/.aws/config must not stop a command that calls no AWS.

boto3 is imported only when a session is made: the node agent imports this module on bare GPU nodes.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.display import cut
from gpuforge.errors import GpuforgeError, InputError

if TYPE_CHECKING:
    import boto3
    import botocore.session

# Files botocore opens by the name an environment variable gives. A pipe there blocks botocore's open()
# for ever (the web identity token is read with a plain open at the first call); a folder fails later with
# less to go on. Missing files keep botocore's own rule (no config file is an empty config).
ENV_FILES = (
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CA_BUNDLE",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)
_IN_EFFECT = "`aws configure list` shows which setting is in effect and where it comes from"


class AwsCredentialsUnavailable(GpuforgeError):
    """The credential chain is configured but a service behind it (STS, SSO, the container or instance
    endpoint) did not answer: nothing to fix in the input, run again (exit 1)."""

    exit_code = 1


def no_credentials(command: str) -> InputError:
    """The one error for "boto3 found no credentials", exit 2 from every command that calls AWS:
    the environment is to be fixed, as with bad input, not a failed check (exit 1)."""
    return InputError(
        f"no AWS credentials found. {command} calls AWS with boto3's standard credential chain: "
        "AWS_PROFILE (a profile in ~/.aws/config or ~/.aws/credentials, SSO included), "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or a container or instance role. "
        "Fix: sign in (e.g. `aws sso login --profile NAME` and `export AWS_PROFILE=NAME`) or export access keys, "
        f"then run {command} again."
    )


def setup_error(error: BaseException, command: str) -> GpuforgeError | None:
    """The gpuforge error (exit 2, the fix named) for a botocore configuration error; None for any other
    error (a refused or failed call is the caller's to judge)."""
    from botocore import exceptions as bx

    again = f"then run {command} again"
    if isinstance(error, bx.NoCredentialsError):
        return no_credentials(command)
    if isinstance(error, bx.ProfileNotFound):
        return InputError(
            f"{error}: AWS_PROFILE names a profile that is in neither ~/.aws/config nor ~/.aws/credentials. "
            "Fix: set AWS_PROFILE to one of the profiles `aws configure list-profiles` lists (`aws configure sso "
            f"--profile NAME` adds one), or unset it to use the default credential chain; {again}."
        )
    if isinstance(error, bx.PartialCredentialsError):
        return InputError(
            f"incomplete AWS credentials: {error}. Fix: give both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            f"(with AWS_SESSION_TOKEN for temporary keys) or neither, or complete the profile; {again}."
        )
    if isinstance(error, bx.ConfigParseError | bx.ConfigNotFound):
        return InputError(
            f"{error}: not an AWS config file botocore can read. Fix: correct it (`[default]` or "
            "`[profile NAME]` headers, then `key = value` lines), or point AWS_CONFIG_FILE / "
            f"AWS_SHARED_CREDENTIALS_FILE at a good one; {again}."
        )
    if isinstance(error, bx.NoRegionError):
        return InputError(
            f"no AWS region: {error}. Fix: set AWS_REGION (or `region` in the profile); {again}."
        )
    if isinstance(error, bx.SSOError | bx.TokenRetrievalError | bx.LoginError):
        return InputError(
            f"the AWS sign-in of the profile in use is missing or expired: {error}. Fix: sign in again "
            f"(`aws sso login --profile NAME`, NAME being AWS_PROFILE); {again}."
        )
    if isinstance(
        error,
        bx.CredentialRetrievalError
        | bx.UnknownCredentialError
        | bx.RefreshWithMFAUnsupportedError
        | bx.InvalidConfigError,
    ):
        # InvalidConfigError covers InfiniteLoopConfigError (a profile that sources itself) and a missing
        # sso-session section; CredentialRetrievalError a credential_process or container endpoint that failed.
        return InputError(
            f"the AWS credentials of the profile in use cannot be loaded: {error}. Fix: correct the profile's "
            f"credential settings ({_IN_EFFECT}); {again}."
        )
    if isinstance(
        error,
        bx.InvalidRetryConfigurationError
        | bx.InvalidDefaultsMode
        | bx.InvalidSTSRegionalEndpointsConfigError
        | bx.InvalidRegionError
        | bx.InvalidEndpointConfigurationError
        | bx.InvalidIMDSEndpointError
        | bx.InvalidIMDSEndpointModeError
        | bx.InvalidProxiesConfigError
        | bx.InvalidS3AddressingStyleError
        | bx.InvalidChecksumConfigError
        | bx.InvalidEndpointDiscoveryConfigurationError
        | bx.UnknownSignatureVersionError,
    ):
        return InputError(
            f"invalid AWS configuration: {error}. Fix: correct that setting (an AWS_* environment variable or "
            f"a key of the profile in ~/.aws/config; {_IN_EFFECT}); {again}."
        )
    return None


def _check_env_files() -> None:
    for name in ENV_FILES:
        value = os.environ.get(name)
        if not value:
            continue
        try:
            info = Path(value).expanduser().stat()
        except (OSError, ValueError, RuntimeError):
            continue  # missing or unnamable: botocore's own rule, read through setup_error
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                f"{name}={cut(value)}: not a regular file (a directory, device or pipe), and botocore reads it "
                f"as AWS configuration (a pipe would block it for ever). Fix: point {name} at the file, or unset it."
            )


@contextmanager
def translated(command: str) -> Iterator[None]:
    """Run a block that reads the AWS configuration: its configuration errors become gpuforge's (exit 2).

    Besides botocore's own errors, botocore lets an OSError (a credential_process or web identity token
    file that does not exist) and a ValueError (an AWS_ENDPOINT_URL that is no URL) through while the
    configuration is read: inside this block those are configuration too.
    """
    from botocore.exceptions import BotoCoreError

    try:
        yield
    except Exception as error:
        found = setup_error(error, command)
        if found is None and isinstance(error, OSError | ValueError) and not isinstance(error, BotoCoreError):
            found = InputError(
                f"the AWS configuration names something that cannot be used: {error}. Fix: correct the setting "
                f"(AWS_ENDPOINT_URL, a profile's credential_process or web_identity_token_file; {_IN_EFFECT}); "
                f"then run {command} again."
            )
        if found is None:
            raise
        raise found from None


def open_session(
    region: str | None,
    *,
    command: str,
    credentials_required: bool = True,
    static_keys: tuple[str, str] | None = None,
) -> boto3.session.Session:
    """A boto3 session from the standard credential chain, its credentials resolved now.

    Resolving them here (not at the first call) brings every configuration error of the chain (an SSO
    token, a credential_process, a token file) to this one place. Without credentials it is the one
    "no AWS credentials" error, unless `credentials_required` is False (the caller has a fallback and
    checks `session.get_credentials()`). `static_keys` (an emulator's dummy access key and secret) replace
    the chain, and no profile is read, so AWS_PROFILE cannot pull a real account in.
    """
    import boto3
    import botocore.session
    from botocore.exceptions import BotoCoreError

    _check_env_files()
    with translated(command):
        if static_keys is None:
            session = boto3.session.Session(region_name=region)
        else:
            isolated = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
            session = boto3.session.Session(
                botocore_session=isolated,
                aws_access_key_id=static_keys[0],
                aws_secret_access_key=static_keys[1],
                region_name=region,
            )
        found = session.get_credentials()
        if found is not None:
            try:
                found.get_frozen_credentials()
            except BotoCoreError as error:
                if setup_error(error, command) is not None:
                    raise
                raise AwsCredentialsUnavailable(
                    f"the AWS credentials of the profile in use could not be fetched: {error}. Fix: check the "
                    f"network path to AWS (STS, SSO or the instance's endpoint), then run {command} again."
                ) from None
    if found is None and credentials_required:
        raise no_credentials(command)
    return session


def client(session: boto3.session.Session, service: str, *, command: str, **kwargs: Any) -> Any:
    """`session.client(service, **kwargs)` with its configuration errors (a bad endpoint URL, retry mode,
    region name) read as gpuforge's."""
    with translated(command):
        return session.client(service, **kwargs)  # type: ignore[call-overload]


@functools.cache
def offline_session() -> botocore.session.Session:
    """A botocore session for its bundled data (regions, service models) that reads no user configuration:
    no profile, no config or credentials file, so AWS_PROFILE naming no profile or a config file that does not
    parse cannot stop a command that makes no AWS call."""
    import botocore.session

    return botocore.session.Session(
        session_vars={
            # (config key, environment variable, default, conversion): no variable, nothing to read.
            "profile": (None, None, None, None),
            "config_file": (None, None, os.devnull, None),
            "credentials_file": (None, None, os.devnull, None),
        }
    )
