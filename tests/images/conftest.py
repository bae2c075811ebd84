"""Fixtures for the image pipeline tests: the real packer and shellcheck, one moto server per module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from image_helpers import BASE_AMI, REGION

from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws, SeedImage
from gpuforge.images.packer import Packer, find_packer


@pytest.fixture(scope="session")
def packer_tool() -> Packer:
    """The installed packer. CI installs it (scripts/bootstrap.sh); its absence fails, never skips."""
    return find_packer()


@pytest.fixture(scope="session")
def shellcheck() -> str:
    found = shutil.which("shellcheck")
    assert found, "shellcheck is not installed; scripts/bootstrap.sh installs it (apt-get install shellcheck)"
    return found


@pytest.fixture(scope="module")
def moto_server() -> Iterator[LocalAws]:
    """One moto server for a test module (it takes a second or two to start), seeded with the base AMI."""
    seeds = [SeedImage(BASE_AMI, "ubuntu 22.04 base", "uefi-preferred", "/dev/sda1")]
    with LocalAws(seeds) as server:
        yield server


@pytest.fixture
def aws_env(moto_server: LocalAws, monkeypatch: pytest.MonkeyPatch) -> LocalAws:
    """Point boto3's standard configuration (AWS_ENDPOINT_URL, credentials) at the module's server."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_CREDENTIALS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_CREDENTIALS[1])
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return moto_server
