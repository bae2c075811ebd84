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
   available, every expected tag).
6. Copy it to every `copy_to` region (reusing a copy already there), tag each
   copy and its snapshots as the source, wait (bounded) until each is available,
   verify it, and share every region's AMI and snapshots with `share_with`.
7. Only then record every region in the catalog, in one atomic write, with the
   build's SBOM beside it (sbom.py says what it holds).

A build stopped after step 5 records nothing; run again and it reuses the AMI
and the copies already made (step 2 and the copy's own reuse).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gpuforge.display import cut, printable
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images import ec2, packer, sbom
from gpuforge.images.catalog import CatalogEntry, load_catalog, now_utc, record_build, utc_timestamp
from gpuforge.images.machine_readable import artifact_amis
from gpuforge.images.matrix import Matrix, load_valid
from gpuforge.images.progress import Progress
from gpuforge.images.render import BUILD_FILE, RenderedBuild, RenderOptions, base_ami, distro_defaults, render
from gpuforge.images.tags import PREFIX, ami_tags
from gpuforge.regions import check_region

DEFAULT_TIMEOUT_S = 3 * 3600.0
# init and validate read files only; they get at most this long of the overall budget.
CHECK_TIMEOUT_S = 300.0
UNKNOWN_PACKER = "unknown"
# A copy of a large AMI takes tens of minutes; wait this long for each before giving up.
DEFAULT_COPY_TIMEOUT_S = 2 * 3600.0
ACCOUNT = re.compile(r"[0-9]{12}")


class BootModeMismatch(GpuforgeError):
    exit_code = 1


@dataclass(frozen=True)
class BuildRequest:
    matrix_path: Path
    region: str
    catalog: Path
    force: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    copy_to: tuple[str, ...] = ()
    share_with: tuple[str, ...] = ()
    copy_timeout_s: float = DEFAULT_COPY_TIMEOUT_S


@dataclass(frozen=True)
class BuildResult:
    entry: CatalogEntry
    built: bool
    copies: tuple[CatalogEntry, ...] = ()


def check_targets(request: BuildRequest) -> None:
    """--region, --copy-to and --share-with name regions AWS has and real accounts; the home region is no copy target."""
    check_region("--region", request.region)
    for region in request.copy_to:
        check_region("--copy-to", region)
        if region == request.region:
            raise InputError(
                f"--copy-to {region}: the AMI is built in {region}; a copy there would be a second AMI of the "
                "same matrix. Fix: leave the build region out of --copy-to."
            )
    if len(set(request.copy_to)) != len(request.copy_to):
        raise InputError(
            f"--copy-to {','.join(request.copy_to)}: a region is named twice. Fix: name each once."
        )
    for account in request.share_with:
        if not ACCOUNT.fullmatch(account):
            raise InputError(
                f"--share-with {cut(account)}: not a 12-digit AWS account id. Fix: pass account ids such as "
                "123456789012, separated by commas."
            )


def catalog_entry(matrix: Matrix, digest: str, ami_id: str, region: str, packer_version: str) -> CatalogEntry:
    """The catalog record of `ami_id`, built from `matrix` in `region` now, by that packer version."""
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
    # Input problems (region, distribution, copy targets) stop the build before any AWS call.
    check_targets(request)
    base_id = base_ami(matrix, aws.region)
    distro_defaults(matrix)
    expected = ami_tags(matrix, digest)
    client = aws.client()

    catalog_before = load_catalog(request.catalog)
    _check_account(request, catalog_before.lookup, digest, aws)
    existing = [image for image in ec2.images_with_digest(client, aws, digest) if image.state == "available"]
    built_sbom: str | None
    if existing and not request.force:
        image = ec2.verify_image(client, aws, existing[0].ami_id, expected)
        home = catalog_before.lookup(digest, aws.region)
        built_sbom = None
        if home is None or home.ami_id != image.ami_id:
            # Built elsewhere (another catalog, another machine): its build time is the AMI's
            # creation time; which packer built it is not recorded on the AMI.
            home = replace(
                catalog_entry(matrix, digest, image.ami_id, aws.region, UNKNOWN_PACKER),
                built_at=utc_timestamp(image.creation_date),
            )
            built_sbom = sbom.from_matrix(matrix, digest, "the AMI was built before, not by this run")
        built = False
    else:
        image, home, built_sbom = _build_new(request, matrix, digest, base_id, aws, tool, progress, grace_s)
        built = True
    home = replace(home, account_id=image.owner_id or home.account_id)
    copies = [
        _copy(request, image, home, aws.in_region(region), progress, report) for region in request.copy_to
    ]
    entries = [home, *[entry for entry, _ in copies]]
    if request.share_with:
        images = [image, *[copy for _, copy in copies]]
        entries = [
            _share(entry, shown, aws, request.share_with)
            for entry, shown in zip(entries, images, strict=True)
        ]
    if progress:
        progress.done()
    if built or any(catalog_before.lookup(*entry.key) != entry for entry in entries):
        recorded = record_build(request.catalog, entries, built_sbom)
        entries = [recorded.lookup(*entry.key) or entry for entry in entries]
    where = ", ".join(entry.region for entry in entries)
    if built:
        # The AMI's name is AWS's answer, and the catalog path the user's: escaped for the terminal.
        report(printable(f"built {image.ami_id} ({image.name}) in {where}; recorded in {request.catalog}"))
    else:
        report(
            printable(
                f"{image.ami_id} in {aws.region} is already built from {matrix.name} {matrix.version} "
                f"(digest {digest[:12]}); recorded {where}, nothing built. Use --force to rebuild."
            )
        )
    return BuildResult(entries[0], built=built, copies=tuple(entries[1:]))


def _check_account(
    request: BuildRequest, lookup: Callable[[str, str], CatalogEntry | None], digest: str, aws: ec2.Aws
) -> None:
    """Before building: the catalog must not record this matrix, in these regions, for another account."""
    recorded = [e for r in (request.region, *request.copy_to) if (e := lookup(digest, r)) and e.account_id]
    if not recorded:
        return
    account = aws.account()
    for entry in recorded:
        if entry.account_id != account:
            raise InputError(
                f"{request.catalog}: images.{digest}.{entry.region} records {entry.ami_id} of account "
                f"{entry.account_id}, and these credentials are account {account}; a build here would give "
                f"stacks an AMI of the wrong account. Fix: build with account {entry.account_id}'s credentials, "
                "or give each account its own catalog (--catalog). Nothing was built or recorded."
            )


def _build_new(
    request: BuildRequest,
    matrix: Matrix,
    digest: str,
    base_id: str,
    aws: ec2.Aws,
    tool: packer.Packer,
    progress: Progress | None,
    grace_s: float,
) -> tuple[ec2.Image, CatalogEntry, str]:
    """Render, run packer, verify: the new AMI, its home entry and its SBOM."""
    client = aws.client()
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
        if aws.endpoint_url:
            text = sbom.from_matrix(
                matrix, digest, f"built against {aws.endpoint_url}, where no provisioner runs"
            )
        else:
            text = sbom.from_package_list(matrix, digest, rendered.directory / sbom.PACKAGES_FILE)
    image = ec2.verify_image(client, aws, ami_id, ami_tags(matrix, digest))
    return image, catalog_entry(matrix, digest, image.ami_id, aws.region, str(tool.version)), text


def _copy(
    request: BuildRequest,
    source: ec2.Image,
    home: CatalogEntry,
    target: ec2.Aws,
    progress: Progress | None,
    report: Callable[[str], None],
) -> tuple[CatalogEntry, ec2.Image]:
    """The AMI in one copy region: a copy already there (unless forced), else a new one; tagged and verified.

    A copy carries none of the source's tags, so each copy and its snapshots get them here;
    the digest tag is also what finds the copy again on the next run.
    """
    client = target.client()
    there = [i for i in ec2.images_with_digest(client, target, home.matrix_digest) if i.state != "failed"]
    if request.force:
        for old in there:
            ec2.deregister(client, target, old)
        there = []
    ami_id = there[0].ami_id if there else ec2.copy_image(client, target, source, home.region)
    step = progress.step if progress else report
    step(f"copying {source.ami_id} from {home.region} to {target.region} as {ami_id}")
    copied = ec2.wait_available(client, target, ami_id, timeout_s=request.copy_timeout_s, report=step)
    ec2.tag_image(client, target, copied, source.tags)
    expected = {key: value for key, value in source.tags.items() if key.startswith(PREFIX)}
    verified = ec2.verify_image(client, target, ami_id, expected)
    entry = replace(
        home,
        ami_id=ami_id,
        region=target.region,
        copied_from=source.ami_id,
        account_id=verified.owner_id or None,
    )
    return entry, verified


def _share(entry: CatalogEntry, image: ec2.Image, aws: ec2.Aws, accounts: tuple[str, ...]) -> CatalogEntry:
    """Share one region's AMI and snapshots; the entry then lists every account it is shared with."""
    region = aws.in_region(entry.region)
    client = region.client()
    ec2.share_image(client, region, image, accounts)
    return replace(entry, shared_with=tuple(ec2.launch_permissions(client, region, image.ami_id)))
