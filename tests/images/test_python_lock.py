"""The image's pip lock: every package pinned and hashed, closed over its dependencies, and the only way pip installs."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from image_helpers import MATRICES
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gpuforge.images.matrix import load_valid
from gpuforge.images.render import RenderOptions, render

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "images" / "scripts"
LOCK = SCRIPTS / "gpuforge-requirements.txt"
ENTRY = re.compile(
    r"^(?P<name>[a-z0-9-]+)==(?P<version>\S+) \\\n(?P<hashes>(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)",
    re.M,
)


def _lock() -> dict[str, Version]:
    text = LOCK.read_text(encoding="utf-8")
    entries = {m["name"]: Version(m["version"]) for m in ENTRY.finditer(text)}
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    # Every non-comment line belongs to an entry: a name line or one of its hash lines.
    assert len(body) == sum(1 + m["hashes"].count("--hash=") for m in ENTRY.finditer(text))
    return entries


def _satisfied(requirement: Requirement, lock: dict[str, Version]) -> bool:
    version = lock.get(canonicalize_name(requirement.name))
    return version is not None and requirement.specifier.contains(version, prereleases=True)


def test_every_runtime_dependency_and_the_build_backend_is_locked_at_a_version_pyproject_allows() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    lock = _lock()
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"], "pip"]
    assert [spec for spec in wanted if not _satisfied(Requirement(spec), lock)] == []


def test_the_lock_is_closed_over_every_locked_package_s_dependencies() -> None:
    lock = _lock()
    checked = 0
    for name, version in lock.items():
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: its closure was checked by pip when the lock was written
        if Version(distribution.version) != version:
            continue
        checked += 1
        for spec in distribution.requires or []:
            requirement = Requirement(spec)
            for python in ("3.11", "3.12"):
                environment = {"python_version": python, "sys_platform": "linux", "extra": ""}
                if requirement.marker is None or requirement.marker.evaluate(environment):
                    assert _satisfied(requirement, lock), f"{name} {version} needs {spec} (Python {python})"
    assert checked >= len(lock) * 3 // 4, "the test environment should hold most locked versions"


def test_pip_installs_only_from_the_hashed_lock_or_the_payload_s_own_source() -> None:
    installs = [
        (script.name, line.strip())
        for script in sorted(SCRIPTS.glob("*.sh"))
        for line in script.read_text(encoding="utf-8").splitlines()
        if re.search(r"\bpip\b.*\binstall\b|\$\{pip_install\[@\]\}", line)
        and not line.lstrip().startswith("#")
    ]
    assert installs == [
        (
            "85-gpuforge.sh",
            "pip_install=(/opt/gpuforge/bin/python -m pip install --quiet --disable-pip-version-check)",
        ),
        (
            "85-gpuforge.sh",
            '"${pip_install[@]}" --require-hashes --no-deps --only-binary=:all: -r "$GPUFORGE_PAYLOAD/scripts/gpuforge-requirements.txt"',
        ),
        (
            "85-gpuforge.sh",
            '"${pip_install[@]}" --no-deps --no-index --no-build-isolation "$GPUFORGE_PAYLOAD/gpuforge-src"',
        ),
    ]


def test_the_lock_travels_in_the_payload(tmp_path: Path) -> None:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    payload = render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out").payload
    assert (payload / "scripts" / LOCK.name).read_bytes() == LOCK.read_bytes()
