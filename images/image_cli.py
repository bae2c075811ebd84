"""`gpuforge image render|build|list|verify|prune|acceptance-container`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpuforge.display import cut, printable
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images import ec2, packer
from gpuforge.images.build import DEFAULT_COPY_TIMEOUT_S, DEFAULT_TIMEOUT_S, BuildRequest, build_image
from gpuforge.images.catalog import DEFAULT_CATALOG, LOCAL_CATALOG, REPO_ROOT, read_catalog
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws, SeedImage
from gpuforge.images.matrix import Matrix, load_valid
from gpuforge.images.progress import Progress
from gpuforge.images.prune import DEFAULT_KEEP, DEFAULT_STACKS, prune
from gpuforge.images.render import BUILD_FILE, RenderOptions, base_ami, distro_defaults, render
from gpuforge.images.signals import SIGTERM_EXIT, Terminated, sigterm_as_interrupt
from gpuforge.images.tags import ami_tags
from gpuforge.regions import region_problem


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{cut(text)} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:  # nan compares false with everything, so test it first
        raise argparse.ArgumentTypeError(
            f"{cut(text)}: the timeout must be a finite number of seconds above 0"
        )
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{cut(text)} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{cut(text)}: keep at least 1 build (the newest)")
    return value


def _words(text: str) -> list[str]:
    """A comma-separated flag value (`123456789012,210987654321`); an empty item is a mistake, not nothing.

    `--copy-to ''` or `--copy-to ,` (an unset CI variable, a stray comma) would otherwise copy
    nowhere and report success.
    """
    words = [word.strip() for word in text.split(",")]
    if not all(words):
        raise argparse.ArgumentTypeError(
            f"{cut(text)} has an empty item. Fix: separate the values by single commas (a,b), or leave the "
            "flag out"
        )
    return words


def _region(text: str) -> str:
    """A region AWS has (botocore's endpoint data), checked before anything runs."""
    problem = region_problem(text.strip())
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text.strip()


def _regions(text: str) -> list[str]:
    return [_region(word) for word in _words(text)]


def register(subparsers: Any) -> None:
    image = subparsers.add_parser("image", help="render, build, list, verify and prune pinned AMIs")
    commands = image.add_subparsers(dest="image_command", required=True, metavar="SUBCOMMAND")

    render_cmd = commands.add_parser("render", help="write the Packer build of a matrix")
    render_cmd.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix YAML file")
    render_cmd.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty folder")
    render_cmd.add_argument(
        "--region",
        type=_region,
        metavar="REGION",
        help="region of the base AMI (default: the matrix's only region)",
    )
    render_cmd.add_argument(
        "--packer-version",
        metavar="VERSION",
        help="render for this packer version instead of the installed one (e.g. 1.6.6 or 1.11.2)",
    )
    render_cmd.set_defaults(handler=_render)

    acceptance = commands.add_parser(
        "acceptance-container",
        help="write the Dockerfile (build context) of a matrix's acceptance container for Kubernetes stacks",
        description="Writes the build context of the container `gpuforge validate --image` runs on a Kubernetes "
        "stack: the matrix's CUDA base by digest, NCCL, EFA installer, aws-ofi-nccl, nccl-tests (MPI=1), dcgmi and "
        "a key-only sshd. Exit codes: 0 written; 1 the matrix fails its check; 2 unusable input (a missing "
        "acceptance_image.base_digest or nccl_tests, an --out folder that is not empty; nothing written).",
    )
    acceptance.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix YAML file")
    acceptance.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty folder")
    acceptance.set_defaults(handler=_acceptance_container)

    build = commands.add_parser(
        "build",
        help="build (or reuse) the AMI of a matrix, copy and share it, and record every region",
        description="Exit codes: 0 built or reused and recorded; 1 the build, a copy or the verification "
        "failed (nothing recorded); 2 unusable input; 130 Ctrl-C; 143 SIGTERM (nothing recorded, "
        "nothing left running).",
    )
    build.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix YAML file")
    build.add_argument(
        "--region",
        type=_region,
        required=True,
        metavar="REGION",
        help="the region to build in (its base AMI is the matrix's)",
    )
    build.add_argument(
        "--catalog",
        type=Path,
        metavar="PATH",
        help=f"catalog folder or single .json file to record in (default: {_shown(DEFAULT_CATALOG)}, "
        f"with --local {_shown(LOCAL_CATALOG)})",
    )
    build.add_argument(
        "--force", action="store_true", help="rebuild (and re-copy) even if an AMI of this matrix exists"
    )
    build.add_argument(
        "--local", action="store_true", help="build against a local AWS emulator (moto) on 127.0.0.1"
    )
    build.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="limit for packer (default: %(default)g)",
    )
    build.add_argument(
        "--copy-to",
        type=_regions,
        action="extend",
        default=[],
        metavar="REGION[,REGION...]",
        help="copy the AMI to these regions, tagged as the source, and record each (default: none)",
    )
    build.add_argument(
        "--share-with",
        type=_words,
        action="extend",
        default=[],
        metavar="ACCOUNT[,ACCOUNT...]",
        help="let these 12-digit accounts launch the AMI in every region, snapshots included (default: none)",
    )
    build.add_argument(
        "--copy-timeout",
        type=_positive,
        default=DEFAULT_COPY_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for each copy to become available (default: %(default)g)",
    )
    build.set_defaults(handler=_build)

    listing = commands.add_parser("list", help="show the AMI catalog")
    listing.add_argument(
        "--catalog",
        type=Path,
        default=DEFAULT_CATALOG,
        metavar="PATH",
        help=f"catalog folder or single .json file (default: {_shown(DEFAULT_CATALOG)})",
    )
    listing.add_argument("--json", action="store_true", help="print the catalog as one JSON document")
    listing.set_defaults(handler=_list)

    verify = commands.add_parser("verify", help="compare an AMI's tags with a matrix")
    verify.add_argument("ami", metavar="AMI", help="the AMI id, e.g. ami-0123456789abcdef0")
    verify.add_argument(
        "--matrix", type=Path, required=True, metavar="MATRIX", help="the matrix the AMI should be built from"
    )
    verify.add_argument(
        "--region", type=_region, required=True, metavar="REGION", help="the region the AMI is in"
    )
    verify.set_defaults(handler=_verify)

    prune_cmd = commands.add_parser(
        "prune",
        help="deregister AMIs (and snapshots) the catalog has superseded; a dry run unless --apply",
        description="Exit codes: 0 pruned, or nothing to prune, or a dry run; 1 a superseded AMI is still "
        "pinned by a stack, or belongs to another account (nothing pruned), or an AWS call failed; "
        "2 unusable input.",
    )
    prune_cmd.add_argument(
        "--catalog",
        type=Path,
        default=DEFAULT_CATALOG,
        metavar="PATH",
        help=f"catalog folder or single .json file (default: {_shown(DEFAULT_CATALOG)})",
    )
    prune_cmd.add_argument(
        "--keep",
        type=_positive_int,
        default=DEFAULT_KEEP,
        metavar="N",
        help="keep the newest N builds of each matrix in each region (default: %(default)s)",
    )
    mode = prune_cmd.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="show what would be pruned and change nothing (the default)"
    )
    mode.add_argument(
        "--apply", action="store_true", help="deregister, delete the snapshots, update the catalog"
    )
    prune_cmd.add_argument(
        "--stacks",
        type=Path,
        default=DEFAULT_STACKS,
        metavar="DIR",
        help=f"the stacks whose AMIs are never pruned (default: {_shown(DEFAULT_STACKS)})",
    )
    prune_cmd.add_argument(
        "--region",
        type=_region,
        metavar="REGION",
        help="region for the account lookup; each AMI is handled in its own region (default: us-east-1)",
    )
    prune_cmd.set_defaults(handler=_prune)


def _shown(path: Path) -> str:
    """A default path for help text: relative to the checkout where it lies in it."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _render_region(matrix: Matrix, region: str | None) -> str:
    if region is not None:
        return region
    regions = sorted(matrix.os.base_ami)
    if len(regions) != 1:
        raise InputError(
            f"the matrix pins base AMIs in {', '.join(regions)}; say which to render. Fix: pass --region."
        )
    return regions[0]


def _render(args: argparse.Namespace) -> int:
    matrix, digest = load_valid(args.matrix)
    region = _render_region(matrix, args.region)
    if args.packer_version:
        try:
            version = Version(args.packer_version)
        except InvalidVersion:
            raise InputError(
                f"--packer-version: {cut(args.packer_version)} is not a version, e.g. 1.6.6"
            ) from None
    else:
        version = packer.find_packer().version
    tool = packer.Packer("packer", version)
    rendered = render(matrix, digest, RenderOptions(region=region, imds=tool.supports_imds), args.out)
    print(
        printable(
            f"rendered {matrix.name} {matrix.version} (digest {digest[:12]}) for packer {version} into {args.out}"
        )
    )
    print(f"  AMI name: {printable(rendered.ami_name)}")
    if tool.has_init:
        print(f"  build: cd {printable(str(args.out))} && packer init . && packer build .")
    else:
        print(
            f"  build: cd {printable(str(args.out))} && packer build {BUILD_FILE}   (packer {version} has no `init`)"
        )
    print("  or let gpuforge run it, verify the AMI and record it: gpuforge image build MATRIX --region R")
    return 0


def _acceptance_container(args: argparse.Namespace) -> int:
    from gpuforge.images.acceptance_container import render_acceptance

    matrix, digest = load_valid(args.matrix)
    out = render_acceptance(matrix, digest, args.out)
    shown = printable(str(out))
    print(
        printable(
            f"rendered the acceptance container of {matrix.name} {matrix.version} (digest {digest[:12]}) into {out}"
        )
    )
    print(f"  build: docker buildx build --platform linux/amd64 --tag REPOSITORY:TAG --push {shown}")
    print(
        "  then pass it by digest: gpuforge validate STACK_DIR --stack NAME --image REPOSITORY@sha256:<digest>"
    )
    return 0


def _build(args: argparse.Namespace) -> int:
    """`image build`; SIGTERM (a cancelled CI job) stops it the way Ctrl-C does, with exit 143."""
    try:
        with sigterm_as_interrupt():
            return _build_inside(args)
    except Terminated:
        raise GpuforgeError(
            "terminated (SIGTERM): the build was stopped and cleaned up; nothing was recorded.",
            exit_code=SIGTERM_EXIT,
        ) from None


def _build_inside(args: argparse.Namespace) -> int:
    tool = packer.find_packer()
    catalog = args.catalog or (LOCAL_CATALOG if args.local else DEFAULT_CATALOG)
    request = BuildRequest(
        args.matrix,
        args.region,
        catalog,
        force=args.force,
        timeout_s=args.timeout,
        copy_to=tuple(args.copy_to),
        share_with=tuple(args.share_with),
        copy_timeout_s=args.copy_timeout,
    )
    progress = Progress(sys.stderr)
    if not args.local:
        build_image(request, ec2.Aws(args.region), tool, progress=progress)
        return 0
    matrix, _ = load_valid(args.matrix)
    base_ami(matrix, args.region)
    _, root_device = distro_defaults(matrix)
    seeds = [
        SeedImage(
            ami_id,
            f"{matrix.os.distro} {matrix.os.release} base ({region})",
            matrix.os.boot_mode,
            root_device,
        )
        for region, ami_id in sorted(matrix.os.base_ami.items())
    ]
    with LocalAws(seeds) as emulator:
        print(f"local AWS emulator (moto) at {emulator.endpoint}; catalog {catalog}", flush=True)
        aws = ec2.Aws(args.region, endpoint_url=emulator.endpoint, credentials=DUMMY_CREDENTIALS)
        build_image(request, aws, tool, progress=progress)
    return 0


def _prune(args: argparse.Namespace) -> int:
    prune(
        args.catalog,
        ec2.Aws(args.region or "us-east-1"),
        keep=args.keep,
        apply=args.apply,
        stacks_dir=args.stacks,
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    catalog = read_catalog(args.catalog, given_by="--catalog")
    if args.json:
        print(json.dumps(catalog.to_json(), indent=2, sort_keys=True))
        return 0
    if not catalog.entries:
        print(f"{printable(str(args.catalog))}: no AMIs recorded")
        return 0
    header = ("AMI", "REGION", "MATRIX", "VERSION", "DIGEST", "BUILT", "PACKER")
    rows = [
        tuple(
            printable(cell)
            for cell in (
                e.ami_id,
                e.region,
                e.matrix_name,
                e.matrix_version,
                e.matrix_digest[:12],
                e.built_at,
                e.packer_version,
            )
        )
        for e in sorted(catalog.entries, key=lambda e: (e.matrix_name, e.matrix_version, e.region))
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if catalog.shadowed:
        replaced = ", ".join(printable(f"{e.ami_id} ({e.region})") for e in catalog.shadowed)
        print(
            f"shadowed by newer records of the same matrix and region (image prune removes them): {replaced}"
        )
    return 0


def _verify(args: argparse.Namespace) -> int:
    matrix, digest = load_valid(args.matrix)
    aws = ec2.Aws(args.region)
    image = ec2.verify_image(aws.client(), aws, args.ami, ami_tags(matrix, digest))
    print(
        printable(
            f"ok: {image.ami_id} in {args.region} carries every tag of {matrix.name} {matrix.version} "
            f"(digest {digest[:12]})"
        )
    )
    return 0
