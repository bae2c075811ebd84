"""`image build`: check, reuse or build, verify, record.

The steps, each of which stops the build with a clear error and leaves the
catalog as it was:

1. Check the matrix (the same findings as `matrix check`).
2. Idempotence: an available AMI tagged with this matrix digest already in the
   region is verified and recorded, and nothing is built, unless `force`.
3. The pinned base AMI must exist and declare the matrix's boot mode.
4. Render into a temporary folder and run packer: `init` where the version has
   it, `validate`, then `build -machine-readable`, with a timeout.
5. Parse the artifacts (de-duplicated), verify the AMI with boto3 (exists,
   available, every expected tag), and only then write the catalog entry.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gpuforge.errors import GpuforgeError
from gpuforge.images import ec2, packer
from gpuforge.images.catalog import CatalogEntry, load_catalog, now_utc, record_entry, utc_timestamp
from gpuforge.images.machine_readable import artifact_amis
from gpuforge.images.matrix import Matrix, load_valid
from gpuforge.images.progress import Progress
from gpuforge.images.render import BUILD_FILE, RenderedBuild, RenderOptions, base_ami, distro_defaults, render
from gpuforge.images.tags import ami_tags

DEFAULT_TIMEOUT_S = 3 * 3600.0
# init and validate read files only; they get at most this long of the overall budget.
CHECK_TIMEOUT_S = 300.0
UNKNOWN_PACKER = "unknown"


class BootModeMismatch(GpuforgeError):
    exit_code = 1


@dataclass(frozen=True)
class BuildRequest:
    matrix_path: Path
    region: str
    catalog: Path
    force: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class BuildResult:
    entry: CatalogEntry
    built: bool


def _entry(matrix: Matrix, digest: str, ami_id: str, region: str, packer_version: str) -> CatalogEntry:
    return CatalogEntry(
        ami_id=ami_id,
        region=region,
        matrix_name=matrix.name,
        matrix_version=matrix.version,
        matrix_digest=digest,
        built_at=now_utc(),
        packer_version=packer_version,
    )


def check_boot_mode(matrix: Matrix, image: ec2.Image, region: str) -> None:
    """The base AMI must declare the boot mode the matrix (and its boot-mode rule) relies on."""
    if image.boot_mode != matrix.os.boot_mode:
        raise BootModeMismatch(
            f"os.boot_mode: the matrix declares {matrix.os.boot_mode!r}, but base AMI {image.ami_id} in {region} "
            f"declares {image.boot_mode or 'no boot mode'!r}. Fix: set os.boot_mode to the AMI's mode (if the "
            "targets support it), or pin a base AMI registered with the declared mode."
        )


def _run_packer(
    tool: packer.Packer,
    rendered: RenderedBuild,
    env: dict[str, str],
    deadline_s: float,
    progress: Progress | None,
    grace_s: float,
) -> str:
    """init/validate/build in the render folder; the single AMI id the build produced."""
    target = str(rendered.directory) if tool.has_init else BUILD_FILE
    budget = deadline_s

    def step(args: list[str], what: str, limit: float) -> packer.PackerRun:
        nonlocal budget
        started = time.monotonic()
        result = packer.run(
            tool,
            args,
            cwd=rendered.directory,
            env=env,
            timeout_s=min(limit, budget),
            progress=progress,
            grace_s=grace_s,
        )
        budget = max(budget - (time.monotonic() - started), 1.0)
        result.require_success(what)
        return result

    if tool.has_init:
        step(["init", target], "init", CHECK_TIMEOUT_S)
    step(["validate", "-machine-readable", target], "validate", CHECK_TIMEOUT_S)
    built = step(["build", "-machine-readable", target], "build", budget)
    amis = artifact_amis(built.events)
    if len(amis) != 1:
        raise packer.PackerFailed(
            f"packer build reported {len(amis)} AMIs ({', '.join(ami for _, ami in amis) or 'none'}); "
            "gpuforge builds exactly one per region. Nothing was recorded."
        )
    return amis[0][1]


def build_image(
    request: BuildRequest,
    aws: ec2.Aws,
    tool: packer.Packer,
    *,
    progress: Progress | None = None,
    report: Callable[[str], None] = print,
    grace_s: float = packer.DEFAULT_GRACE_S,
) -> BuildResult:
    """Build (or reuse) the AMI of a matrix in one region and record it in the catalog."""
    matrix, digest = load_valid(request.matrix_path)
    # Input problems (region, distribution) stop the build before any AWS call.
    base_id = base_ami(matrix, aws.region)
    distro_defaults(matrix)
    expected = ami_tags(matrix, digest)
    client = aws.client()

    existing = [image for image in ec2.images_with_digest(client, aws, digest) if image.state == "available"]
    if existing and not request.force:
        image = ec2.verify_image(client, aws, existing[0].ami_id, expected)
        entry = load_catalog(request.catalog).lookup(digest, aws.region)
        if entry is None or entry.ami_id != image.ami_id:
            # Built elsewhere (another catalog, another machine): its build time is the AMI's
            # creation time; which packer built it is not recorded on the AMI.
            entry = replace(
                _entry(matrix, digest, image.ami_id, aws.region, UNKNOWN_PACKER),
                built_at=utc_timestamp(image.creation_date),
            )
            record_entry(request.catalog, entry)
        report(
            f"{image.ami_id} in {aws.region} is already built from {matrix.name} {matrix.version} "
            f"(digest {digest[:12]}); recorded it, nothing built. Use --force to rebuild."
        )
        return BuildResult(entry, built=False)

    base = ec2.base_image(client, aws, base_id)
    check_boot_mode(matrix, base, aws.region)
    options = RenderOptions(
        region=aws.region,
        imds=tool.supports_imds,
        endpoint=aws.endpoint_url,
        force=request.force,
        root_device=base.root_device_name,
    )

    with tempfile.TemporaryDirectory(prefix="gpuforge-build-") as workdir:
        rendered = render(matrix, digest, options, Path(workdir) / "render")
        env = aws.packer_env(os.environ)
        ami_id = _run_packer(tool, rendered, env, request.timeout_s, progress, grace_s)

    image = ec2.verify_image(client, aws, ami_id, expected)
    entry = _entry(matrix, digest, image.ami_id, aws.region, str(tool.version))
    record_entry(request.catalog, entry)
    report(f"built {image.ami_id} ({rendered.ami_name}) in {aws.region}; recorded in {request.catalog}")
    return BuildResult(entry, built=True)
